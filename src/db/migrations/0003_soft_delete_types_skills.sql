DROP INDEX "artifact_types_org_slug_unique";--> statement-breakpoint
DROP INDEX "skills_org_slug_unique";--> statement-breakpoint
ALTER TABLE "artifact_types" ADD COLUMN "deleted_at" timestamp(6) with time zone;--> statement-breakpoint
ALTER TABLE "skills" ADD COLUMN "deleted_at" timestamp(6) with time zone;--> statement-breakpoint
CREATE UNIQUE INDEX "artifact_types_org_slug_unique" ON "artifact_types" USING btree ("organization_id","slug") WHERE "artifact_types"."deleted_at" is null;--> statement-breakpoint
CREATE UNIQUE INDEX "skills_org_slug_unique" ON "skills" USING btree ("organization_id","slug") WHERE "skills"."deleted_at" is null;