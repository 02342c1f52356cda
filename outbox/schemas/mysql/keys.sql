-- Encryption key rotation and status (outbox/db/keys.py): the statements are in
-- common/keys.sql; what differs per dialect is here. An envelope starts
-- {"$sealed":"v1:KEY_ID: (outbox/job/sealing.py).

-- fragment: sealed_key_id
-- The key id of the row's payload envelope; NULL for plaintext.
CASE WHEN payload LIKE '{"$sealed":"v1:%' THEN SUBSTRING_INDEX(SUBSTRING_INDEX(payload, ':', 3), ':', -1) END

-- fragment: keys_lock
-- How a rotation batch holds its rows: a row a worker, the relay or a producer holds is
-- passed over, not waited for (a later run picks it up).
FOR UPDATE SKIP LOCKED
