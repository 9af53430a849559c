"""Promotion as a signed attestation: an in-toto Statement v1 in a DSSE envelope, signed with a key that
lives outside results/, checked against a list of trusted public keys.

Why: a record's content_sha256 and its flag digest catch accidents, not forgeries (anyone who can run
Python recomputes them). A signature by a key kept outside results/ can only be made by whoever holds
that key, and verify says whose key it was.

What is whose: securesystemslib makes and checks the envelope (`dsse.Envelope`: PAE, base64, the
signatures) and the signatures (`CryptoSigner`, `SSlibKey`); cryptography only reads PEM key files.
The Statement is a plain dict: it has four fields, and the `in-toto-attestation` bindings would bring
protobuf into the torch-free core for them; `verify_envelope` checks their shape instead. Only the
predicate (`predicate()`) is h3gates' own: what was promoted, the resolved config's digest and, as
SLSA v1 provenance lists its inputs, `resolvedDependencies` = every upstream report with its sha256.

Where keys live (an argument, e.g. from the config, wins over the environment, which wins over the default):
- signing key: `$H3GATES_KEY`, else `<config dir>/keys/<user>@<host>.key`, where <config dir> is
  `$XDG_CONFIG_HOME/h3gates` or `~/.config/h3gates`. Per user *and* machine, so that "whose key signed"
  names both, and a home shared by a cluster's nodes holds one key per node rather than one key that
  every node's jobs share. Created on first use (Ed25519, PEM PKCS#8, mode 0600, in a 0700 folder) and
  then added to the local trusted list. A CI or cluster key is any unencrypted PEM private key
  (`openssl genpkey -algorithm ed25519 -out ci.key`; Ed25519, ECDSA and RSA work) named by
  `$H3GATES_KEY` or the config; its name in messages is its file's stem.
- trusted keys: `$H3GATES_TRUSTED_KEYS`, else `<config dir>/trusted_keys.json`. A key made elsewhere (a CI
  or cluster key, a colleague's machine) is trusted by adding its public entry: `export_public` on the
  machine that holds it, `import_public` (the CLI's `python -m h3gates keys trust <file>`) where records
  are verified. A PEM public key file works too.
Neither may be under results/: whoever can write the results could otherwise replace them.

No torch, no numpy: verify imports this module.
"""

from __future__ import annotations

import binascii
import copy
import fcntl
import getpass
import json
import os
import re
import secrets
import socket
import time
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key, load_pem_public_key
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import FormatError, VerificationError
from securesystemslib.signer import CryptoSigner, SSlibKey

from h3gates.core.errors import AttestationError
from h3gates.core.fsutil import atomic_write

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://h3gates.dev/promotion/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"  # the DSSE payload type of an in-toto Statement
RESULTS = "results"  # = h3gates.core.outputs.RESULTS (not imported: this module depends only on errors and fsutil)
TRUST_HINT = "python -m h3gates keys trust <its public key file>"
_SHA256 = re.compile(r"[0-9a-f]{64}")


# ------------------------------------------------------------------ where keys live
def config_dir() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "h3gates"


def whoami() -> str:
    """`user@host`, made safe for a file name (a container without a passwd entry has only a uid)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return re.sub(r"[^A-Za-z0-9._-]", "_", user) + "@" + re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())


def key_path(path=None) -> Path:
    return Path(path or os.environ.get("H3GATES_KEY") or config_dir() / "keys" / f"{whoami()}.key")


def trusted_path(path=None) -> Path:
    return Path(path or os.environ.get("H3GATES_TRUSTED_KEYS") or config_dir() / "trusted_keys.json")


def _outside_results(path: Path, what: str) -> Path:
    """Refuse a key or trusted list under ./results (the workflow's results, relative to where it runs)."""
    p, r = path.resolve(), Path(RESULTS).resolve()
    if p == r or r in p.parents:
        raise AttestationError(
            f"{what} {path} is under {RESULTS}/: keep it outside (whoever writes results could replace it)"
        )
    return path


# ------------------------------------------------------------------ signing keys
class NamedSigner(CryptoSigner):
    """A securesystemslib CryptoSigner that also knows its key file and a name for messages (the file's
    stem: `user@host` for a key made here). Its keyid is securesystemslib's default: the SHA-256 of the
    public key's canonical form, the same on every machine."""

    def __init__(self, private_key, name: str, path: Path):
        super().__init__(private_key)
        self.name, self.path = name, path


def signing_key(path=None, *, trusted_keys=None) -> NamedSigner:
    """The signer of the key at `path` (default: see the module docstring), created on first use and
    then trusted in the list at `trusted_keys` (default: see the module docstring). Raises AttestationError for a
    key under results/, readable or writable by others, encrypted or not a private key."""
    p = _outside_results(key_path(path), "signing key")
    if not p.exists():
        return _create(p, trusted_keys)
    return _load(p)


def _create(p: Path, trusted_keys) -> NamedSigner:
    if not p.parent.exists():
        try:
            p.parent.mkdir(parents=True)
            p.parent.chmod(0o700)  # mkdir's mode is masked by the umask; the folder of private keys is the user's alone
        except FileExistsError:  # another first use made it a moment ago (its chmod is its own)
            pass
    new = CryptoSigner.generate_ed25519()
    tmp = atomic_write(p.parent / f".{p.name}.{secrets.token_hex(6)}.new", new.private_bytes, mode=0o600)
    try:
        os.link(tmp, p)  # appears whole, and never over a key another process made first (then theirs is used)
        made = True
    except FileExistsError:
        made = False
    finally:
        tmp.unlink(missing_ok=True)
    signer = _load(p)
    if made:
        trust(public_key_entry(signer), path=trusted_keys)
    return signer


def _load(p: Path) -> NamedSigner:
    mode = p.stat().st_mode & 0o777
    if mode & 0o077:
        raise AttestationError(f"signing key {p} is accessible by others (mode {mode:o}): chmod 600 {p}")
    try:
        private = load_pem_private_key(p.read_bytes(), password=None)
        return NamedSigner(private, p.stem, p)
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise AttestationError(
            f"signing key {p}: not an unencrypted PEM private key of a supported type ({e})"
        ) from None


def public_key_entry(signer: CryptoSigner, name: str | None = None) -> dict:
    """{keyid, name, keytype, scheme, keyval}: what a trusted list holds for a key (securesystemslib's
    key serialization plus the keyid and a name)."""
    return {
        "keyid": signer.public_key.keyid,
        "name": name or getattr(signer, "name", None) or signer.public_key.keyid[:16],
        **signer.public_key.to_dict(),
    }


def _sslib_key(entry: dict) -> SSlibKey:
    """The key of a public entry, rebuilt from its key material: a malformed key is refused when it is
    trusted, and a keyid that is not its key's own (securesystemslib's default keyid) is refused too."""
    try:
        public, keytype = entry["keyval"]["public"], entry["keytype"]
        crypto = (
            Ed25519PublicKey.from_public_bytes(bytes.fromhex(public))
            if keytype == "ed25519"
            else load_pem_public_key(public.encode())
        )
        key = SSlibKey.from_crypto(crypto, scheme=entry["scheme"])
    except (KeyError, TypeError, ValueError, UnsupportedAlgorithm) as e:
        raise AttestationError(f"not a public key entry ({type(e).__name__}: {e})") from None
    if key.keytype != keytype or entry.get("keyid", key.keyid) != key.keyid:
        raise AttestationError(f"public key entry: keyid {entry.get('keyid')} is not its key's (that is {key.keyid})")
    return key


# ------------------------------------------------------------------ the trusted list
def trusted(path=None) -> dict[str, dict]:
    """{keyid: public entry} of the trusted list (empty when it does not exist). Raises AttestationError
    for a list that is not one, that others may write or that lies under results/ (whoever can write
    there could add their own key)."""
    p = _outside_results(trusted_path(path), "trusted key list")
    if not p.exists():
        return {}
    mode = p.stat().st_mode & 0o777
    if mode & 0o022:
        raise AttestationError(f"trusted key list {p} is writable by others (mode {mode:o}): chmod 644 {p}")
    try:
        keys = json.loads(p.read_text())["keys"]
        return {k: {**e, "keyid": k} for k, e in keys.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise AttestationError(f"{p}: not a trusted key list ({type(e).__name__}: {e})") from None


def trust(entry: dict, name: str | None = None, path=None) -> dict:
    """Add a public entry to the trusted list at `path` (under a lock: two first uses at once keep both
    keys), named `name` (default: the entry's). Returns the stored entry."""
    key = _sslib_key(entry)
    p = _outside_results(trusted_path(path), "trusted key list")
    stored = {"name": name or entry.get("name") or key.keyid[:16], **key.to_dict()}
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p.parent / f".{p.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        keys = {k: {f: v for f, v in e.items() if f != "keyid"} for k, e in trusted(p).items()}
        keys[key.keyid] = stored
        doc = {
            "comment": f"public keys whose h3gates attestations verify accepts; add one with: {TRUST_HINT}",
            "keys": keys,
        }
        atomic_write(p, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return {"keyid": key.keyid, **stored}


def export_public(out=None, key=None, *, trusted_keys=None) -> dict:
    """The public entry of the signing key at `key` (default: this user's on this machine, created if
    need be), written as JSON to `out` when given: the file another machine's `import_public` reads."""
    entry = public_key_entry(signing_key(key, trusted_keys=trusted_keys))
    if out is not None:
        atomic_write(out, json.dumps(entry, indent=1, sort_keys=True) + "\n")
    return entry


def import_public(file, name: str | None = None, *, trusted_keys=None) -> dict:
    """Trust the key in `file`: a public entry (export_public's JSON) or a PEM public key (then named
    `name` or the file's stem). Returns the stored entry; raises AttestationError for anything else."""
    p = Path(file)
    text = p.read_text()
    if text.lstrip().startswith("-----BEGIN"):
        try:
            key = SSlibKey.from_crypto(load_pem_public_key(text.encode()))
        except (ValueError, UnsupportedAlgorithm) as e:
            raise AttestationError(f"{p}: not a PEM public key of a supported type ({e})") from None
        return trust({"keyid": key.keyid, **key.to_dict()}, name or p.stem, trusted_keys)
    try:
        entry = json.loads(text)
    except ValueError as e:
        raise AttestationError(f"{p}: neither a PEM public key nor a public key entry (JSON: {e})") from None
    if not isinstance(entry, dict):
        raise AttestationError(f"{p}: not a public key entry")
    return trust(entry, name, trusted_keys)


# ------------------------------------------------------------------ the statement
SOURCE_DIGEST = "h3gates-source-sha256"  # a source file's behaviour digest (h3gates.core.sourcedigest)


def source_digest(hexdigest: str) -> str:
    """A subject value for a source file: digested by its behaviour (comments and layout left out), not
    its bytes, under its own algorithm name in the statement's DigestSet."""
    return f"{SOURCE_DIGEST}:{hexdigest}"


def _split(value) -> tuple[str, str] | None:
    if not isinstance(value, str):
        return None
    alg, _, h = value.rpartition(":")
    alg = alg or "sha256"
    return (alg, h) if alg in ("sha256", SOURCE_DIGEST) and _SHA256.fullmatch(h) else None


def _descriptors(files: dict[str, str], what: str) -> list[dict]:
    """in-toto ResourceDescriptors ({name, digest: {algorithm: hex}}), sorted by name; a value is a hex
    sha256 of the file's bytes, or `source_digest(...)` of a source file."""
    bad = [n for n, h in files.items() if _split(h) is None]
    if bad:
        raise ValueError(f"{what} {bad[0]}: not a sha256 hex digest: {files[bad[0]]!r}")
    return [{"name": n, "digest": dict([_split(h)])} for n, h in sorted(files.items())]


def _value(digest: dict) -> str:
    """The subject value of a DigestSet, as `_descriptors` took it."""
    if SOURCE_DIGEST in digest:
        return source_digest(digest[SOURCE_DIGEST])
    return digest["sha256"]


def predicate(
    *,
    candidate: str,
    profile: str,
    flag_line: str,
    deployable: bool,
    performance_gate_enforced: bool,
    verdict: str,
    config_digest: str,
    materials: dict[str, str],
    host: str | None = None,
    promoted_at: str | None = None,
    **extra,
) -> dict:
    """h3gates' promotion predicate (PREDICATE_TYPE). Fields carry the record's names, so that verify can
    compare them with the record (`check_predicate`). `config_digest`: the SHA-256 of the resolved
    configuration (h3gates.core.fingerprints.digest); `materials`: {upstream report: sha256}, listed as
    SLSA v1 provenance's `resolvedDependencies`; `extra`: any further JSON fields (device, pins, notes)."""
    return {
        "candidate": candidate,
        "profile": profile,
        "flag_line": flag_line,
        "deployable": bool(deployable),
        "performance_gate_enforced": bool(performance_gate_enforced),
        "verdict": verdict,
        "config_digest": config_digest,
        "host": host or socket.gethostname(),
        "promoted_at": promoted_at or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "resolvedDependencies": _descriptors(materials, "material"),
        **extra,
    }


def statement(subject: dict[str, str], predicate: dict) -> dict:
    """An in-toto Statement v1 about `subject` ({path: sha256}: the flag, the record, the candidate's
    sources), of h3gates' promotion predicate type. Raises ValueError for no subject or a bad digest."""
    if not subject:
        raise ValueError("an in-toto statement needs at least one subject")
    return {
        "_type": STATEMENT_TYPE,
        "subject": _descriptors(subject, "subject"),
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }


# ------------------------------------------------------------------ the envelope
def sign(statement: dict, signer) -> dict:
    """The DSSE envelope of `statement` signed by `signer` (any securesystemslib Signer): a dict with
    payload (base64 of the statement's JSON), payloadType and signatures [{keyid, sig}]."""
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    env = Envelope(payload, PAYLOAD_TYPE, {})
    env.sign(signer)  # signs DSSE's pre-authentication encoding of (payload type, payload)
    return env.to_dict()


def write_envelope(path, env: dict) -> Path:
    """One line of JSON (a one-envelope `.intoto.jsonl` bundle), written atomically, 0644 like records."""
    return atomic_write(path, json.dumps(env, sort_keys=True, separators=(",", ":")) + "\n")


def verify_envelope(env, trusted_keys=None, predicate_type: str = PREDICATE_TYPE) -> tuple[dict, str]:
    """-> (statement, the trusted list's name of the key that signed). `env`: an envelope dict or its
    file; `trusted_keys`: `trusted()`'s dict, or the path of a trusted list (default: see the module
    docstring). Raises AttestationError, one line, for: not an envelope, a payload type other than an
    in-toto statement's, no signature, only keys not in the trusted list (their keyids), a signature
    that does not verify (payload, payload type or signature changed), a statement not of `predicate_type`
    (a promotion's, or a job's link: h3gates.core.links)."""
    where = str(env) if isinstance(env, str | Path) else "attestation"
    if isinstance(env, str | Path):
        try:
            env = json.loads(Path(env).read_text())
        except FileNotFoundError:
            raise AttestationError(f"{where}: missing") from None
        except ValueError as e:
            raise AttestationError(f"{where}: not one JSON DSSE envelope ({e})") from None
    keys = trusted_keys if isinstance(trusted_keys, dict) else trusted(trusted_keys)
    if not isinstance(env, dict) or not {"payload", "payloadType", "signatures"} <= env.keys():
        raise AttestationError(f"{where}: not a DSSE envelope (it needs payload, payloadType and signatures)")
    if env["payloadType"] != PAYLOAD_TYPE:
        raise AttestationError(f"{where}: payload type {env['payloadType']!r}, expected {PAYLOAD_TYPE!r}")
    if not env["signatures"]:
        raise AttestationError(f"{where}: unsigned (no signature)")
    try:
        # from_dict rewrites the signatures it is given: hand it a copy, the caller's dict stays as read
        envelope = Envelope.from_dict(copy.deepcopy(env))
    except (KeyError, TypeError, ValueError, AttributeError, binascii.Error, FormatError) as e:
        raise AttestationError(f"{where}: malformed DSSE envelope ({type(e).__name__}: {e})") from None
    ours = [k for k in envelope.signatures if k in keys]
    if not ours:
        ids = ", ".join(envelope.signatures)
        raise AttestationError(
            f"{where}: signed by a key not in the trusted list (keyid {ids}); to trust it: {TRUST_HINT}"
        )
    try:
        accepted = envelope.verify([_sslib_key(keys[k]) for k in ours], 1)
    except VerificationError:
        who = ", ".join(f"{keys[k]['name']} (keyid {k[:16]})" for k in ours)
        raise AttestationError(
            f"{where}: bad signature by {who}: the statement or the signature changed after signing"
        ) from None
    stmt = _statement_of(envelope.payload, where, predicate_type)
    return stmt, keys[next(iter(accepted))]["name"]


def _statement_of(payload: bytes, where: str, predicate_type: str = PREDICATE_TYPE) -> dict:
    try:
        stmt = json.loads(payload)
    except ValueError:
        raise AttestationError(f"{where}: the signed payload is not JSON") from None
    if not isinstance(stmt, dict) or stmt.get("_type") != STATEMENT_TYPE:
        raise AttestationError(f"{where}: the signed payload is not an in-toto Statement v1")
    if stmt.get("predicateType") != predicate_type:
        what = "h3gates promotion's" if predicate_type == PREDICATE_TYPE else "the one expected"
        raise AttestationError(
            f"{where}: predicate type {stmt.get('predicateType')!r} is not {what} ({predicate_type})"
        )
    try:
        _subjects(stmt)
        if predicate_type == PREDICATE_TYPE:
            _materials(stmt)
    except (KeyError, TypeError, AttributeError) as e:
        raise AttestationError(f"{where}: malformed statement ({type(e).__name__}: {e})") from None
    return stmt


def _subjects(stmt: dict) -> dict[str, str]:
    return {s["name"]: _value(s["digest"]) for s in stmt["subject"]}


def _materials(stmt: dict) -> dict[str, str]:
    return {d["name"]: d["digest"]["sha256"] for d in stmt["predicate"]["resolvedDependencies"]}


# ------------------------------------------------------------------ does it attest these files?
def _compare(kind: str, attested: dict[str, str], here: dict[str, str]) -> list[str]:
    reasons = []
    for p in sorted(set(attested) | set(here)):
        if p not in attested:
            reasons.append(f"{kind} {p}: not in the attestation")
        elif p not in here:
            reasons.append(f"{kind} {p}: in the attestation but not here (missing, or another promotion's)")
        elif attested[p] != here[p]:
            reasons.append(
                f"{kind} {p}: {_short(here[p])} is not the attested {_short(attested[p]).split()[-1]} "
                "(edited, or another promotion's)"
            )
    return reasons


def _short(value: str) -> str:
    alg, h = _split(value) or ("sha256", str(value))
    return f"{'sha256' if alg == 'sha256' else 'source digest'} {h[:12]}"


def check_subjects(statement: dict, files: dict[str, str], materials: dict[str, str] | None = None) -> list[str]:
    """Reasons the statement does not attest exactly `files` ({path: sha256}: a subject missing, extra or
    of another digest) and, when given, exactly `materials` (the upstream reports); [] when it does."""
    reasons = _compare("subject", _subjects(statement), files)
    if materials is not None:
        reasons += _compare("upstream report", _materials(statement), materials)
    return reasons


def check_predicate(statement: dict, **expected) -> list[str]:
    """Reasons the predicate's fields differ from `expected` (e.g. the record's candidate, profile,
    deployable, verdict): an attestation of another candidate, profile or machine."""
    got = statement["predicate"]
    return [f"the attestation says {k}={got.get(k)!r}, expected {v!r}" for k, v in expected.items() if got.get(k) != v]


__all__ = [
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "NamedSigner",
    "check_predicate",
    "check_subjects",
    "config_dir",
    "export_public",
    "import_public",
    "key_path",
    "predicate",
    "public_key_entry",
    "sign",
    "source_digest",
    "signing_key",
    "statement",
    "trust",
    "trusted",
    "trusted_path",
    "verify_envelope",
    "whoami",
    "write_envelope",
]
