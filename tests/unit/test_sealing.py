"""The keyring and the envelope (``outbox.job.sealing``), without a database: bad keyrings
are refused where they are given, naming the key id and never the key; envelopes round
trip, are deterministic per key, and a changed byte or a missing key is a named error."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator

import orjson
import pytest
from structlog.testing import capture_logs

from outbox import Job, sealing
from outbox.errors import ConfigurationError, InvalidJob, MissingKey, TamperedPayload
from outbox.job import MAX_PAYLOAD_BYTES, fingerprint, normalise

K1 = bytes(range(32))
K2 = bytes(range(32, 64))


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


@pytest.fixture(autouse=True)
def _no_keyring(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(sealing.ENV_KEYS, raising=False)
    monkeypatch.delenv(sealing.ENV_HOOK, raising=False)
    sealing.reset()
    yield
    sealing.reset()


def test_a_sealed_text_opens_under_any_key_of_the_ring_and_names_its_key() -> None:
    old = sealing.Keyring({"k1": K1})
    both = sealing.Keyring({"k2": K2, "k1": K1})
    sealed = old.seal('{"email":"a@example.com"}')
    assert sealed.startswith('{"$sealed":"v1:k1:') and "example" not in sealed
    assert orjson.loads(sealed)  # JSON text: the relay's checks hold unchanged
    assert both.open(sealed) == '{"email":"a@example.com"}'
    assert both.seal("1").startswith('{"$sealed":"v1:k2:')  # the first key seals
    assert sealing.key_id_of(sealed) == "k1" and sealing.key_id_of('{"a":1}') is None
    assert both.open('{"a":1}') == '{"a":1}'  # plaintext reads as plaintext


def test_sealing_is_deterministic_per_key_and_differs_across_keys_and_texts() -> None:
    ring = sealing.Keyring({"k1": K1, "k2": K2})
    assert ring.seal("x") == ring.seal("x")
    assert ring.seal("x") != ring.seal("y")
    assert ring.seal("x") != ring.seal("x", "k2")


@pytest.mark.parametrize(
    ("keys", "wanted"),
    [
        ({"k1": b"short"}, "'k1' is 5 bytes; AES-256 needs 32"),
        ({"k1": K1 + b"x"}, "'k1' is 33 bytes"),
        ({"k1": "a string"}, "'k1' must be bytes"),
        ({"kä": K1}, "'k\\\\xe4' is not ASCII"),
        ({"k 1": K1}, "'k 1' must be 1-64 characters"),
        ({}, "keyring is empty"),
    ],
)
def test_a_bad_keyring_is_refused_naming_the_key_id_never_the_key(
    keys: dict[str, bytes], wanted: str
) -> None:
    with pytest.raises(ConfigurationError, match=wanted.replace("(", r"\(")) as caught:
        sealing.configure(keys)
    assert b64(K1) not in str(caught.value) and "short" not in str(caught.value)
    assert sealing.active() is None  # nothing half configured


def test_duplicate_key_ids_are_refused_in_pairs_and_in_the_environment() -> None:
    with pytest.raises(ConfigurationError, match="'k1' is given twice"):
        sealing.Keyring([("k1", K1), ("k1", K2)])
    with pytest.raises(ConfigurationError, match="'k1' is given twice"):
        sealing.parse_env(f"k1:{b64(K1)},k1:{b64(K2)}")


@pytest.mark.parametrize(
    ("value", "wanted"),
    [
        ("k1", "item 0 is not KEY_ID:BASE64KEY"),
        ("k1:!!!notbase64", "'k1' is not valid base64"),
        (f"k1:{b64(b'x' * 16)}", "'k1' is 16 bytes"),
        (f"é:{b64(K1)}", "is not ASCII"),
    ],
)
def test_a_bad_environment_keyring_is_refused_when_first_read(
    monkeypatch: pytest.MonkeyPatch, value: str, wanted: str
) -> None:
    monkeypatch.setenv(sealing.ENV_KEYS, value)
    with pytest.raises(ConfigurationError, match=wanted) as caught:
        sealing.check()
    assert "notbase64" not in str(caught.value)


def test_the_environment_keyring_is_ordered_and_accepts_url_safe_base64(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = bytes([251] * 32)  # base64 with '+' and '/'; url-safe has '-' and '_'
    monkeypatch.setenv(
        sealing.ENV_KEYS, f"new:{base64.urlsafe_b64encode(key).decode()}, old:{b64(K1)}"
    )
    ring = sealing.active()
    assert ring is not None and ring.ids == ("new", "old") and ring.current == "new"


def test_a_hook_supplies_the_keyring_and_a_bad_return_is_refused() -> None:
    ring = sealing.configure(lambda: {"kms-1": K1})
    assert ring is not None and ring.current == "kms-1"
    with pytest.raises(ConfigurationError, match="must return a mapping"):
        sealing.configure(lambda: [("k", K1)])  # type: ignore[arg-type, return-value]


def test_an_environment_hook_names_a_callable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sealing.ENV_HOOK, "os:getcwd")
    with pytest.raises(ConfigurationError, match="must return a mapping"):
        sealing.check()
    sealing.reset()
    monkeypatch.setenv(sealing.ENV_HOOK, "no_such_module_x:keys")
    with pytest.raises(ConfigurationError, match="cannot import 'no_such_module_x:keys'"):
        sealing.check()
    monkeypatch.setenv(sealing.ENV_KEYS, f"k1:{b64(K1)}")
    sealing.reset()
    with pytest.raises(ConfigurationError, match="not both"):
        sealing.check()


def test_a_changed_byte_is_tampered_and_an_unknown_key_is_missing() -> None:
    ring = sealing.Keyring({"k1": K1})
    sealed = ring.seal('{"a":1}')
    body = sealed[len('{"$sealed":"v1:k1:') : -2]
    raw = bytearray(base64.urlsafe_b64decode(body))
    raw[-1] ^= 1
    changed = sealed.replace(body, base64.urlsafe_b64encode(bytes(raw)).decode())
    with pytest.raises(TamperedPayload, match="'k1'"):
        ring.open(changed)
    with pytest.raises(TamperedPayload):  # moved under another id: the id is authenticated
        sealing.Keyring({"k2": K1}).open(sealed.replace("v1:k1:", "v1:k2:"))
    with pytest.raises(TamperedPayload):
        ring.open('{"$sealed":"not an envelope"}')
    with pytest.raises(MissingKey, match="'k1'") as caught:
        sealing.Keyring({"k2": K2}).open(sealed)
    assert caught.value.key_id == "k1" and b64(K1) not in str(caught.value)


# Sealed by the first release of outbox.job.sealing: stored rows and their fingerprints
# depend on these exact bytes (the same plaintext under the same key seals the same).
KNOWN = '{"$sealed":"v1:k1:5azh-7G_MPllpfSHz4a17PBxu4GpDfL0NnJ_AlcSpBBpYz3HCI8hqg2T"}'


def test_an_envelope_from_the_first_release_opens_and_seals_to_the_same_bytes() -> None:
    ring = sealing.Keyring({"k1": K1})
    assert ring.open(KNOWN) == '{"user_id":42}'
    assert ring.seal('{"user_id":42}') == KNOWN


@pytest.mark.parametrize(
    "text",
    [
        KNOWN.replace("5azh", "5a!h"),  # a character base64 does not have
        KNOWN.replace("5azh-7G_", ""),  # cut short
        KNOWN.replace("v1:k1:", "v1:k\\u0031:"),  # the id JSON-escaped
        KNOWN.replace("v1:k1:", "v1:k1 \\n:"),  # an id no key can have
        KNOWN.replace("v1:", "v2:"),
    ],
)
def test_a_malformed_envelope_is_tampered_and_logs_no_key_id(text: str) -> None:
    with capture_logs() as logs, pytest.raises(TamperedPayload):
        sealing.Keyring({"k1": K1, "k2": K2}).open(text)
    assert logs == []


def test_with_no_keyring_a_sealed_text_is_a_missing_key_and_plaintext_passes() -> None:
    sealed = sealing.Keyring({"k1": K1}).seal("1")
    with pytest.raises(MissingKey, match="'k1'"):
        sealing.open_text(sealed)
    assert sealing.seal("1") == "1" and sealing.loads("[1]") == [1]
    assert sealing.readable(sealed) == f"encrypted (key k1, {len(sealed)} bytes)"


def test_normalise_seals_the_payload_and_the_fingerprint_is_keyed() -> None:
    plain = normalise(Job("mail.welcome", {"user": 42}))
    sealing.configure({"k1": K1})
    sealed = normalise(Job("mail.welcome", {"user": 42}))
    assert sealed.payload_json.startswith(sealing.MARKER)
    assert sealing.loads(sealed.payload_json) == {"user": 42}
    assert fingerprint(sealed, None) != fingerprint(plain, None)  # not guessable from SHA-256
    assert normalise(Job("mail.welcome", {"user": 42})) == sealed  # a replay matches
    sealing.configure({"k1": K2})
    assert fingerprint(normalise(Job("mail.welcome", {"user": 42})), None) != fingerprint(
        sealed, None
    )


def test_a_plaintext_payload_that_looks_sealed_is_refused() -> None:
    with pytest.raises(InvalidJob, match="'\\$sealed' is reserved"):
        normalise(Job("a.b", {"$sealed": "v1:k1:AAAA"}))
    assert normalise(Job("a.b", {"$sealed2": 1, "a": 1})).payload_json  # only the first member


def test_a_payload_over_the_limit_once_sealed_is_refused() -> None:
    sealing.configure({"k1": K1})
    big = "x" * (MAX_PAYLOAD_BYTES - 100)  # fits as plaintext, not as base64 ciphertext
    with pytest.raises(InvalidJob, match="bytes once encrypted; the limit is 65535"):
        normalise(Job("a.b", big))


def test_replay_texts_cover_plaintext_and_every_other_key() -> None:
    ring = sealing.configure({"k2": K2, "k1": K1})
    assert ring is not None
    sealed = ring.seal("[1]")
    assert sealing.replay_texts(sealed) == ["[1]", ring.seal("[1]", "k1")]
    assert os.environ.get(sealing.ENV_KEYS) is None


def test_open_json_gives_the_plaintexts_bytes_for_every_key_of_the_ring() -> None:
    # Key ids of two lengths: the worker's open cuts the envelope at each head length.
    ring = sealing.configure({"k2": K2, "k1": K1, "older-key": K2})
    assert ring is not None
    for key_id in ring.ids:
        sealed = ring.seal('{"email":"a@example.com"}', key_id)
        assert sealing.open_json(sealed) == b'{"email":"a@example.com"}'
    assert sealing.open_json(KNOWN) == b'{"user_id":42}'  # the first release's envelope
    assert sealing.open_json('{"a":1}') == b'{"a":1}'  # plaintext reads as plaintext
    assert sealing.loads(KNOWN) == {"user_id": 42}


@pytest.mark.parametrize(
    "text",
    [
        KNOWN.replace("5azh", "5a!h"),  # a character base64 does not have
        KNOWN.replace("5azh-7G_", ""),  # cut short
        KNOWN.replace("v1:k1:", "v1:k\\u0031:"),  # the id JSON-escaped
        KNOWN.replace("v1:", "v2:"),
        KNOWN[:-2] + "]]",  # the envelope's end changed, its ciphertext intact
        KNOWN.replace("5azh", "5azi"),  # a changed byte of the nonce
        KNOWN.replace("v1:k1:", "v1:k2:"),  # moved under another id: the id is authenticated
    ],
)
def test_open_json_refuses_what_open_refuses(text: str) -> None:
    sealing.configure({"k1": K1, "k2": K1})
    with capture_logs() as logs, pytest.raises(TamperedPayload):
        sealing.open_json(text)
    assert logs == []


def test_open_json_names_a_missing_key_with_or_without_a_keyring() -> None:
    with capture_logs() as logs, pytest.raises(MissingKey, match="'k1'"):
        sealing.open_json(KNOWN)  # no keyring at all
    sealing.configure({"k2": K2})
    with pytest.raises(MissingKey, match="'k1'"):
        sealing.open_json(KNOWN)
    assert [entry["key_id"] for entry in logs] == ["k1"]
