-- memgov `kagent-db` erasure role (SPEC D4).
--
-- Run once as the owner of kagent's `memory` table, connected to kagent's database:
--   psql "$KAGENT_DB_OWNER_URL" -v ON_ERROR_STOP=1 -f docs/erasure-role.sql
-- then give the role a password (never commit it) and hand memgov its URL through
-- MEMGOV_ERASURE__KAGENT_DB_URL_FILE:
--   ALTER ROLE memgov_eraser PASSWORD '<from your secret store>';
--
-- What the role can do: see which rows exist (id, agent_name, user_id, created_at, expires_at),
-- delete them, and nothing else. It can never read `content`, `embedding`, `metadata` or
-- `access_count`, and it cannot insert or update. DELETE ... WHERE and DELETE ... RETURNING need
-- SELECT on the columns they reference, which is why id, user_id and created_at are granted.
-- Re-running the file is safe.

DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'memgov_eraser') THEN
    CREATE ROLE memgov_eraser LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS NOINHERIT;
  END IF;
END
$$;

-- Each memgov replica opens at most 4 connections (only while erasing or sweeping); the bound
-- keeps a leaked credential from exhausting kagent's connections. Raise it above 4 x replicas.
ALTER ROLE memgov_eraser CONNECTION LIMIT 32;
ALTER ROLE memgov_eraser SET statement_timeout = '30s';

DO $$
BEGIN
  EXECUTE format('GRANT CONNECT ON DATABASE %I TO memgov_eraser', current_database());
END
$$;

GRANT USAGE ON SCHEMA public TO memgov_eraser;

-- Start from nothing on the table, then grant exactly the columns erasure needs.
REVOKE ALL ON TABLE public.memory FROM memgov_eraser;
GRANT SELECT (id, agent_name, user_id, created_at, expires_at) ON TABLE public.memory TO memgov_eraser;
GRANT DELETE ON TABLE public.memory TO memgov_eraser;
