import { type Static, Type } from '@sinclair/typebox';
import { Defaulted } from './schemas.js';

export const PageQuery = Type.Object({
  page: Defaulted(Type.Integer({ minimum: 1, default: 1, description: '1-based page number' })),
  page_size: Defaulted(
    Type.Integer({ minimum: 1, maximum: 100, default: 50, description: 'Items per page (max 100)' }),
  ),
});
export type PageQuery = Static<typeof PageQuery>;

export const Pagination = Type.Object(
  {
    page: Type.Integer(),
    page_size: Type.Integer(),
    total_count: Type.Integer(),
    total_pages: Type.Integer(),
  },
  { title: 'Pagination' },
);
export type Pagination = Static<typeof Pagination>;

export function pagination(query: PageQuery, totalCount: number): Pagination {
  return {
    page: query.page,
    page_size: query.page_size,
    total_count: totalCount,
    total_pages: Math.ceil(totalCount / query.page_size),
  };
}

/**
 * The rows a page skips. Any positive page is valid, however far past the end (an empty page);
 * beyond what a 32-bit offset holds (the statements' `int` parameters) every page is empty anyway,
 * so the offset stops there instead of failing the statement.
 */
export const offsetOf = (query: PageQuery) => Math.min((query.page - 1) * query.page_size, MAX_OFFSET);

const MAX_OFFSET = 2_147_483_647;
