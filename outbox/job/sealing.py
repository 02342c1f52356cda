"""Encryption at rest: the keyring, and sealing a payload into a self-describing envelope.

With a keyring configured, every payload text is sealed where it is made canonical
(``outbox.job.normalise``), so the intent, the queue row, the broker message, the
workflow node and every backup hold ciphertext; results and a dead letter's message and
trace are sealed where they are made (``outbox.results.encode``,
``outbox.queue.execute.failure_of``). The one place a payload is opened for a handler is
``outbox.queue.execute.Runner``, shared by the SQL worker, the JetStream lane and
``outbox.testing``.

The envelope is a JSON object with one member, so the payload column needs no migration
and the relay's checks (JSON text, size, fingerprint) run on it unchanged::

    {"$sealed":"v1:<key id>:<base64url(nonce || AES-256-GCM ciphertext || tag)>"}

A text that does not start with ``{"$sealed":`` is plaintext (rows written before
encryption was turned on keep working); ``normalise`` refuses a plaintext payload whose
first member is ``$sealed``, so no plaintext row can be mistaken for an envelope.

Nonce: the first 12 bytes of HMAC-SHA256 over the plaintext, under a nonce key derived
from the data key (a synthetic IV, as in SIV modes). Two different plaintexts get
different nonces (as with random ones, up to a 96-bit collision), and the same plaintext
under the same key gets the same envelope. That is what keeps idempotency working: the
fingerprint (SHA-256 over the row, payload envelope included; ``outbox.job``) is then a
keyed digest of the job, equal for a replay under the same key and unguessable without
the key. What it reveals: that two stored jobs under one key carry the same payload.
The key id is the additional authenticated data, so an envelope moved under another id
fails its tag.

Keyring sources, read once, when first needed (a bad one is a ``ConfigurationError``
naming the key id, never the key):

- ``configure(keys)``: an ordered mapping ``{key_id: 32 bytes}`` or a callable returning
  one (a KMS or secret manager hook); ``configure(None)`` turns encryption off.
- ``OUTBOX_ENCRYPTION_KEYS``: ``id1:BASE64KEY,id2:BASE64KEY`` (standard or URL-safe
  base64 of 32 bytes).
- ``OUTBOX_ENCRYPTION_KEYRING``: ``MODULE:ATTR`` naming such a callable.

The first key seals; every key opens. Key ids are 1-64 characters of
``[A-Za-z0-9_.-]``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import importlib
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import orjson
import structlog

from outbox.errors import ConfigurationError, InvalidJob, MissingKey, TamperedPayload

ENV_KEYS = "OUTBOX_ENCRYPTION_KEYS"
ENV_HOOK = "OUTBOX_ENCRYPTION_KEYRING"
MARKER = '{"$sealed":'
VERSION = "v1"
KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
KEY_ID_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_PREFIX = f'{MARKER}"{VERSION}:'
_PREFIX_LEN = len(_PREFIX)
_SUFFIX = '"}'
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")
_SHA256_BLOCK = 64
_b2a = binascii.b2a_base64
_a2b = binascii.a2b_base64

KeySource = Mapping[str, bytes] | Callable[[], Mapping[str, bytes]] | None
_log = structlog.get_logger("outbox.sealing")  # the name logs have always carried


class _Key(NamedTuple):
    key_id: str
    aead: Any  # cryptography's AESGCM
    decrypt: Any  # its bound decrypt (the worker's per-job path looks up no attribute)
    inner: Any  # HMAC-SHA256 under the nonce key, its two padded-key states (RFC 2104)
    outer: Any
    aad: bytes
    prefix: str  # the envelope text up to the ciphertext


class Keyring:
    """Key id -> key; the first seals, all open. Checked whole when built."""

    __slots__ = ("_first", "_head_lengths", "_heads", "_keys", "ids")

    def __init__(self, keys: Mapping[str, bytes] | Iterable[tuple[str, bytes]]) -> None:
        pairs = list(keys.items() if isinstance(keys, Mapping) else keys)
        if not pairs:
            raise ConfigurationError("the encryption keyring is empty: give at least one key")
        built: dict[str, _Key] = {}
        for key_id, key in pairs:
            check_key_id(key_id)
            if key_id in built:
                raise ConfigurationError(f"encryption key id {key_id!r} is given twice")
            built[key_id] = _build(key_id, key)
        self.ids: tuple[str, ...] = tuple(built)
        self._keys = built
        self._first = built[self.ids[0]]
        # The envelope up to its ciphertext -> key, and the lengths of those heads: one
        # slice and one lookup check the envelope's start, version and key id (open_json)
        self._heads = {key.prefix: key for key in built.values()}
        self._head_lengths = tuple(sorted({len(head) for head in self._heads}))

    @property
    def current(self) -> str:
        """The id of the key that seals."""
        return self._first.key_id

    def seal(self, text: str, key_id: str | None = None) -> str:
        """``text`` as an envelope under the first key (or ``key_id``)."""
        key = self._first if key_id is None else self._keys[key_id]
        data = text.encode()
        nonce = _nonce(key, data)
        sealed = nonce + key.aead.encrypt(nonce, data, key.aad)
        return key.prefix + _b2a(sealed, newline=False).translate(_TO_URLSAFE).decode() + _SUFFIX

    def open(self, text: str) -> str:
        """The plaintext of an envelope; a plaintext ``text`` as it is."""
        if not text.startswith(MARKER):
            return text
        key_id, sealed = _split(text)
        key = self._keys.get(key_id)
        if key is None:
            raise _missing(key_id)
        try:
            return key.aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], key.aad).decode()  # type: ignore[no-any-return]
        except Exception:  # InvalidTag, or bytes that are not UTF-8
            raise TamperedPayload(key_id) from None


def _nonce(key: _Key, data: bytes) -> bytes:
    """HMAC-SHA256(nonce key, data), first 12 bytes: from the key's padded states copied,
    not set up again per call (hmac.new or hmac.digest spend ~6 us of a ~9 us seal
    doing that; this is ~1.5 us, and the same bytes)."""
    inner = key.inner.copy()
    inner.update(data)
    outer = key.outer.copy()
    outer.update(inner.digest())
    return outer.digest()[:NONCE_BYTES]  # type: ignore[no-any-return]


def _hmac_states(key: bytes) -> tuple[Any, Any]:
    """The inner and outer SHA-256 states of HMAC under ``key`` (32 bytes, under the
    64-byte block: zero-padded, never hashed first)."""
    padded = key.ljust(_SHA256_BLOCK, b"\0")
    return (
        hashlib.sha256(bytes(b ^ 0x36 for b in padded)),
        hashlib.sha256(bytes(b ^ 0x5C for b in padded)),
    )


def _build(key_id: str, key: object) -> _Key:
    if not isinstance(key, (bytes, bytearray)):
        raise ConfigurationError(
            f"encryption key {key_id!r} must be bytes (got {type(key).__name__})"
        )
    if len(key) != KEY_BYTES:
        raise ConfigurationError(
            f"encryption key {key_id!r} is {len(key)} bytes; AES-256 needs {KEY_BYTES}"
        )
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise ConfigurationError(
            "encryption needs the cryptography package: install outbox-relay[encryption]"
        ) from None
    raw = bytes(key)
    enc = hmac.new(raw, b"outbox aes-256-gcm", hashlib.sha256).digest()
    nonce_key = hmac.new(raw, b"outbox synthetic nonce", hashlib.sha256).digest()
    aad = f"outbox:{VERSION}:{key_id}".encode()
    aead = AESGCM(enc)
    return _Key(key_id, aead, aead.decrypt, *_hmac_states(nonce_key), aad, f"{_PREFIX}{key_id}:")


def check_key_id(key_id: object) -> str:
    """A valid key id, or a ``ConfigurationError`` saying why (never the key)."""
    if not isinstance(key_id, str):
        raise ConfigurationError(
            f"an encryption key id must be a str (got {type(key_id).__name__})"
        )
    if not key_id.isascii():
        shown = key_id.encode("ascii", "backslashreplace").decode()
        raise ConfigurationError(f"encryption key id '{shown}' is not ASCII")
    if not KEY_ID_PATTERN.fullmatch(key_id):
        raise ConfigurationError(
            f"encryption key id {key_id!r} must be 1-64 characters of A-Z a-z 0-9 _ . -"
        )
    return key_id


def _split(text: str) -> tuple[str, bytes]:
    """(key id, nonce || ciphertext) of an envelope as ``Keyring.seal`` writes it, cut
    out by position (no JSON parse: the worker opens one per job); any other text that
    starts like an envelope goes through ``_parse``, which says what is wrong with it."""
    end = text.find(":", _PREFIX_LEN) if text.startswith(_PREFIX) else -1
    if end > 0 and text.endswith(_SUFFIX):
        try:
            sealed = _a2b(text[end + 1 : -2].encode().translate(_FROM_URLSAFE), strict_mode=True)
        except (binascii.Error, ValueError):
            sealed = b""
        if len(sealed) >= NONCE_BYTES + TAG_BYTES:
            return text[_PREFIX_LEN:end], sealed
    return _parse(text)


def _parse(text: str) -> tuple[str, bytes]:
    """(key id, nonce || ciphertext) of an envelope; a malformed one is tampered with."""
    try:
        value = orjson.loads(text)["$sealed"]
        version, key_id, body = value.split(":")
        sealed = base64.urlsafe_b64decode(body)
    except (
        orjson.JSONDecodeError,
        KeyError,
        TypeError,
        AttributeError,
        ValueError,
        binascii.Error,
    ):
        raise TamperedPayload("?") from None
    if version != VERSION or len(sealed) < NONCE_BYTES + TAG_BYTES:
        raise TamperedPayload(key_id if KEY_ID_PATTERN.fullmatch(key_id) else "?")
    return key_id, sealed


def _missing(key_id: str) -> MissingKey | TamperedPayload:
    """The error, and its one log line, for an envelope whose key is not in the ring; an
    id no key could have is a tampered envelope (and is not written to the log)."""
    if not KEY_ID_PATTERN.fullmatch(key_id):
        return TamperedPayload("?")
    _log.warning("sealing.missing_key", key_id=key_id)
    return MissingKey(key_id)


def key_id_of(text: str | None) -> str | None:
    """The key id of an envelope, ``None`` for plaintext (no key needed to read it)."""
    if text is None or not text.startswith(_PREFIX):
        return None
    end = text.find(":", len(_PREFIX))
    return text[len(_PREFIX) : end] if end > 0 else None


def parse_env(value: str) -> dict[str, bytes]:
    """``id1:BASE64KEY,id2:BASE64KEY`` -> ordered keys; errors name the id, not the key."""
    keys: dict[str, bytes] = {}
    for index, item in enumerate(part.strip() for part in value.split(",")):
        key_id, sep, encoded = item.partition(":")
        if not sep:
            raise ConfigurationError(
                f"{ENV_KEYS}: item {index} is not KEY_ID:BASE64KEY (no ':' in it)"
            )
        key_id = check_key_id(key_id.strip())
        if key_id in keys:
            raise ConfigurationError(f"{ENV_KEYS}: encryption key id {key_id!r} is given twice")
        try:
            padded = encoded.strip() + "=" * (-len(encoded.strip()) % 4)
            keys[key_id] = base64.b64decode(
                padded.replace("-", "+").replace("_", "/"), validate=True
            )
        except (binascii.Error, ValueError):
            raise ConfigurationError(
                f"{ENV_KEYS}: encryption key {key_id!r} is not valid base64"
            ) from None
    return keys


def _hook(spec: str) -> Callable[[], Mapping[str, bytes]]:
    module_name, _, attr = spec.partition(":")
    try:
        hook = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError):
        raise ConfigurationError(
            f"{ENV_HOOK}: cannot import {spec!r} (expected MODULE:ATTR)"
        ) from None
    if not callable(hook):
        raise ConfigurationError(f"{ENV_HOOK}: {spec!r} is not callable")
    return hook  # type: ignore[no-any-return]


def build(source: KeySource) -> Keyring | None:
    """A keyring from a mapping or a hook (called now); ``None`` turns encryption off."""
    if source is None:
        return None
    keys = source() if callable(source) else source
    if not isinstance(keys, Mapping):
        raise ConfigurationError(
            f"the encryption keyring hook must return a mapping of key id to key "
            f"(got {type(keys).__name__})"
        )
    return Keyring(keys)


def _from_env() -> Keyring | None:
    value, spec = os.environ.get(ENV_KEYS, "").strip(), os.environ.get(ENV_HOOK, "").strip()
    if value and spec:
        raise ConfigurationError(f"set {ENV_KEYS} or {ENV_HOOK}, not both")
    if spec:
        return build(_hook(spec))
    return build(parse_env(value)) if value else None


_UNSET: Any = object()
_ring: Keyring | None = _UNSET
_lock = threading.Lock()


def active() -> Keyring | None:
    """The keyring in force (read from the environment on first use), or ``None``."""
    ring = _ring
    if ring is _UNSET:
        return _load()
    return ring


def _load() -> Keyring | None:
    global _ring
    with _lock:
        if _ring is _UNSET:
            _ring = _from_env()
        return _ring


def configure(keys: KeySource | Keyring) -> Keyring | None:
    """Set this process's keyring (see the module docstring); checked here, whole."""
    global _ring
    ring = keys if isinstance(keys, Keyring) else build(keys)
    with _lock:
        _ring = ring
    return ring


def reset() -> None:
    """Forget the keyring: the environment is read again on next use (tests)."""
    global _ring
    with _lock:
        _ring = _UNSET


def check() -> None:
    """Read the keyring now, so a bad one is refused before a command runs."""
    active()


def seal(text: str) -> str:
    """``text`` sealed under the keyring's first key; as it is when encryption is off."""
    ring = active()
    return text if ring is None else ring.seal(text)


def seal_payload(payload_json: str, limit: int) -> str:
    """A canonical payload as stored: refused if it could be read as an envelope,
    sealed when a keyring is configured, and within the size limit either way."""
    if payload_json.startswith(MARKER):
        raise InvalidJob("payload member '$sealed' is reserved for encrypted payloads")
    ring = active()
    if ring is None:
        return payload_json
    sealed = ring.seal(payload_json)
    if len(sealed) > limit:
        raise InvalidJob(f"payload is {len(sealed)} bytes once encrypted; the limit is {limit}")
    return sealed


def open_text(text: str) -> str:
    """The plaintext of ``text`` (an envelope or plaintext). Raises ``MissingKey`` when
    its key is not in the keyring (or none is configured), ``TamperedPayload`` when
    its tag does not verify."""
    if not text.startswith(MARKER):
        return text
    ring = active()
    if ring is None:
        key_id, _ = _split(text)
        raise _missing(key_id)
    return ring.open(text)


def open_json(text: str) -> bytes:
    """``open_text`` as UTF-8 bytes, which ``orjson.loads`` takes as they are: the
    worker's once-per-job open (``outbox.queue.execute.Runner``), kept to the fewest
    Python-level steps (it is most of what encryption costs a drained job, see
    bench/RESULTS.md). An envelope as ``Keyring.seal`` writes it under a key of the
    ring is cut by position and opened here; anything else (plaintext, a missing key,
    a malformed or tampered envelope) goes through ``open_text``, which says what is
    wrong."""
    ring = _ring
    if ring is not _UNSET and ring is not None:
        for length in ring._head_lengths:  # one, unless the key ids differ in length
            key = ring._heads.get(text[:length])
            if key is not None and text[-2:] == _SUFFIX:
                try:
                    sealed = _a2b(
                        text[length:-2].encode().translate(_FROM_URLSAFE), strict_mode=True
                    )
                    return key.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], key.aad)  # type: ignore[no-any-return]
                except Exception:  # not base64, or the tag fails: open_text says which
                    break
    return open_text(text).encode()


def describe(text: str | None) -> str | None:
    """What a display shows instead of a sealed text it cannot or must not open:
    ``encrypted (key k1, 312 bytes)``; ``None`` for plaintext."""
    key_id = key_id_of(text)
    if key_id is None or text is None:
        return None
    return f"encrypted (key {key_id}, {len(text.encode())} bytes)"


def readable(text: str | None) -> str | None:
    """``text`` opened when this process has its key, else what ``describe`` says:
    for displays that show a payload or message today."""
    if text is None or not text.startswith(MARKER):
        return text
    try:
        return open_text(text)
    except (MissingKey, TamperedPayload):
        return describe(text) or "encrypted"


def replay_texts(sealed: str) -> list[str]:
    """The plaintext, and the same plaintext sealed under every other key of the ring:
    a job recorded before encryption was turned on, or before a rotation, stored one of
    them (``outbox.record`` recognises its replay by it)."""
    ring = active()
    if ring is None or not sealed.startswith(MARKER):
        return []
    plain = ring.open(sealed)
    own = key_id_of(sealed)
    return [plain] + [ring.seal(plain, key_id) for key_id in ring.ids if key_id != own]


def loads(text: str) -> Any:
    """Decoded JSON of a stored text, opened first when it is an envelope: every reader
    of a payload or result that hands it to application code goes through here."""
    return orjson.loads(open_json(text) if text.startswith(MARKER) else text)
