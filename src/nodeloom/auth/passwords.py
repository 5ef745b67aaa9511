"""Password hashing with argon2id. Verification of an unknown e-mail runs against a dummy hash
so response time does not reveal which e-mails have accounts."""

from __future__ import annotations

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_hasher = PasswordHasher()  # argon2id with the library's RFC 9106 low-memory profile

# A hash of a throwaway password, made once with the profile above: hashing it at import
# cost every process (server, worker, CLI) about 140 ms of CPU. Verifying against it costs
# what verifying a real hash of the same profile costs; should the library's profile change,
# it no longer matches, and a hash of the new profile is made at import as before.
_DUMMY_HASH = (
    "$argon2id$v=19$m=65536,t=3,p=4$KWKlhX4j6xT7MTj7nFn1XA"
    "$V/I9xb59n6YK5ehaCXMl5/82u4wOhisIuAKSSyuzOBE"
)
if _hasher.check_needs_rehash(_DUMMY_HASH):
    _DUMMY_HASH = _hasher.hash("dummy-password-for-timing")


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    try:
        return _hasher.verify(password_hash or _DUMMY_HASH, password) and password_hash is not None
    except (VerificationError, InvalidHashError):
        return False
