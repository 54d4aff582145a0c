-- Background work announced to every process (src/jobs/queue.ts, JOBS_CHANNEL), so that idle
-- processes need not poll for it: a new webhook event wakes the outbox task, a newly queued chat
-- message wakes the chat-queue sweep. Row triggers: an insert of no row (an event nobody
-- subscribes to) costs nothing; identical notifications of one transaction are sent once, at commit.
CREATE FUNCTION scriptorium_work_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('scriptorium_jobs', TG_ARGV[0]);
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER webhook_events_work_added AFTER INSERT ON webhook_events
  FOR EACH ROW EXECUTE FUNCTION scriptorium_work_added('webhooks-outbox');
--> statement-breakpoint
CREATE TRIGGER chat_queued_messages_work_added AFTER INSERT ON chat_queued_messages
  FOR EACH ROW EXECUTE FUNCTION scriptorium_work_added('chat-queue');
