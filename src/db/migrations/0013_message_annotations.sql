ALTER TABLE "artifacts" ADD COLUMN "parsed" jsonb;--> statement-breakpoint
ALTER TABLE "chat_messages" ADD COLUMN "parsed" jsonb;--> statement-breakpoint
ALTER TABLE "chat_messages" ADD COLUMN "citations" jsonb DEFAULT '[]'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "chat_messages" ADD COLUMN "regenerates_id" integer;--> statement-breakpoint
ALTER TABLE "chat_messages" ADD COLUMN "replaced_by_id" integer;