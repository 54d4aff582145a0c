import { and, eq, gt, sql } from 'drizzle-orm';
import type { Queryable } from '../../db/client.js';
import { creditLedger, organizations } from '../../db/schema/index.js';
import { paymentRequired } from '../../http/errors.js';

/** DESIGN.md 4: a turn or generation starts only while the balance is above zero. */
export async function ensureCredits(db: Queryable, organizationId: number): Promise<void> {
  const [row] = await db
    .select({ id: organizations.id })
    .from(organizations)
    .where(and(eq(organizations.id, organizationId), gt(organizations.creditBalance, 0)));
  if (!row) throw paymentRequired();
}

export interface Usage {
  inputTokens: number;
  outputTokens: number;
}

export interface Prices {
  creditsPer1kInputTokens: number;
  creditsPer1kOutputTokens: number;
}

export const costOf = (usage: Usage, prices: Prices) =>
  (usage.inputTokens * prices.creditsPer1kInputTokens +
    usage.outputTokens * prices.creditsPer1kOutputTokens) /
  1000;

/**
 * Charges finished work: a ledger row naming project and key, and the balance lowered in the same
 * transaction. Returns the credits charged.
 */
export async function chargeUsage(
  tx: Queryable,
  charge: {
    organizationId: number;
    projectId: number | null;
    apiKeyId: number | null;
    modelConfigurationId: number | null;
    usage: Usage;
    prices: Prices;
    reference: string;
  },
): Promise<number> {
  const credits = costOf(charge.usage, charge.prices);
  await tx.insert(creditLedger).values({
    organizationId: charge.organizationId,
    kind: 'usage',
    amount: -credits,
    projectId: charge.projectId,
    apiKeyId: charge.apiKeyId,
    modelConfigurationId: charge.modelConfigurationId,
    inputTokens: charge.usage.inputTokens,
    outputTokens: charge.usage.outputTokens,
    reference: charge.reference,
  });
  if (credits !== 0) {
    await tx
      .update(organizations)
      .set({ creditBalance: sql`${organizations.creditBalance} - ${credits}` })
      .where(eq(organizations.id, charge.organizationId));
  }
  return credits;
}
