CREATE TABLE "event_streams" (
	"key" text PRIMARY KEY NOT NULL,
	"last_seq" integer DEFAULT 0 NOT NULL,
	"alive_until" timestamp(6) with time zone NOT NULL,
	"ended_at" timestamp(6) with time zone,
	"created_at" timestamp(6) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "stream_events" (
	"stream_key" text NOT NULL,
	"seq" integer NOT NULL,
	"event" text NOT NULL,
	"data" jsonb NOT NULL,
	CONSTRAINT "stream_events_stream_key_seq_pk" PRIMARY KEY("stream_key","seq")
);
--> statement-breakpoint
ALTER TABLE "chat_turns" ADD COLUMN "cancel_requested_at" timestamp(6) with time zone;--> statement-breakpoint
CREATE INDEX "event_streams_ended_idx" ON "event_streams" USING btree ("ended_at");--> statement-breakpoint
CREATE INDEX "event_streams_alive_idx" ON "event_streams" USING btree ("alive_until");