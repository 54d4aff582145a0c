-- Principal caches (src/core/principal-cache.ts) drop their entries when a key, a user or an
-- organization changes in a way that changes who a key is: announced to every process.
CREATE FUNCTION scriptorium_principals_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('scriptorium_principals', TG_TABLE_NAME);
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER api_keys_principal_changed AFTER UPDATE OF revoked_at, kind, organization_id, user_id, key_hash OR DELETE ON api_keys
  FOR EACH STATEMENT EXECUTE FUNCTION scriptorium_principals_changed();
--> statement-breakpoint
CREATE TRIGGER users_principal_changed AFTER UPDATE OF role, deleted_at, organization_id OR DELETE ON users
  FOR EACH STATEMENT EXECUTE FUNCTION scriptorium_principals_changed();
--> statement-breakpoint
CREATE TRIGGER organizations_principal_changed AFTER UPDATE OF active OR DELETE ON organizations
  FOR EACH STATEMENT EXECUTE FUNCTION scriptorium_principals_changed();
