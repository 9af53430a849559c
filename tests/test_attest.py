"""Signed promotion attestations (h3gates.core.attest): keys made on first use outside results/, the
trusted list, the in-toto Statement in a DSSE envelope, and every forgery the issue names refused: a
field, the flag, the payload or the signature changed, an untrusted or another key, records swapped
between candidates, profiles and machines. Every key and list lives under tmp_path (HOME and
XDG_CONFIG_HOME point there): the real home is never touched."""

from __future__ import annotations

import base64
import hashlib
import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from securesystemslib.dsse import Envelope
from workflow_util import import_blocked

from h3gates.core import attest as A
from h3gates.core.errors import AttestationError

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh home and config dir, no key variables, the cwd a workspace (its results/ is ./results)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.delenv("H3GATES_KEY", raising=False)
    monkeypatch.delenv("H3GATES_TRUSTED_KEYS", raising=False)
    (tmp_path / "ws").mkdir()
    monkeypatch.chdir(tmp_path / "ws")
    return tmp_path


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def promotion(candidate="modulate_fusion", profile="tiny", deployable=False, host="h200-a"):
    """-> (statement, subject files, materials) of a promotion as promotion.py would attest it."""
    var = "H3_NVFP4_" + candidate.upper()
    flag = f"results/{profile}/promotion/{candidate}.env"
    flag_text = f"# written by h3gates promote {candidate}\n{var}={int(deployable)}\n"
    files = {
        flag: sha(flag_text),
        f"results/{profile}/promotion/{candidate}.json": sha(f"record {candidate} {profile}"),
        f"kernels/{candidate}/cpu.py": sha(f"kernel {candidate}"),
    }
    materials = {f"results/{profile}/{candidate}/r{r}.json": sha(f"r{r} {candidate} {profile}") for r in range(1, 9)}
    pred = A.predicate(
        candidate=candidate,
        profile=profile,
        flag_line=f"{var}={int(deployable)}",
        deployable=deployable,
        performance_gate_enforced=deployable,
        verdict="promoted" if deployable else "promoted (rehearsal, not deployable)",
        config_digest=sha(f"config {profile}"),
        materials=materials,
        host=host,
        promoted_at="2026-12-01T00:00:00Z",
    )
    return A.statement(files, pred), files, materials


def reencode(env: dict, stmt: dict) -> dict:
    """The envelope with another payload and its original signatures (a forger without the key)."""
    return {**env, "payload": base64.b64encode(json.dumps(stmt, sort_keys=True).encode()).decode()}


def payload(env: dict) -> dict:
    return json.loads(base64.b64decode(env["payload"]))


def other_key(tmp_path, name="mallory@laptop", trusted_keys=None):
    return A.signing_key(tmp_path / "elsewhere" / f"{name}.key", trusted_keys=trusted_keys or tmp_path / "mallory.json")


# ------------------------------------------------------------------ keys
def test_a_key_is_created_on_first_use_0600_in_a_0700_folder_and_trusted(home):
    signer = A.signing_key()
    path = home / "home" / ".config" / "h3gates" / "keys" / f"{A.whoami()}.key"
    assert signer.path == path and path.is_file() and "@" in signer.name and signer.name == path.stem
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert signer.public_key.keytype == "ed25519"
    listed = A.trusted()
    assert list(listed) == [signer.public_key.keyid] and listed[signer.public_key.keyid]["name"] == signer.name
    assert A.trusted_path() == home / "home" / ".config" / "h3gates" / "trusted_keys.json"
    before = path.read_bytes()
    assert A.signing_key().public_key.keyid == signer.public_key.keyid and path.read_bytes() == before
    assert not list(path.parent.glob(".*.new"))  # no temporary key file left


def test_the_key_path_comes_from_the_argument_then_the_environment(home, monkeypatch):
    monkeypatch.setenv("H3GATES_KEY", str(home / "env" / "ci.key"))
    monkeypatch.setenv("H3GATES_TRUSTED_KEYS", str(home / "env" / "trusted.json"))
    by_env = A.signing_key()
    assert by_env.path == home / "env" / "ci.key" and by_env.name == "ci"
    assert by_env.public_key.keyid in A.trusted(home / "env" / "trusted.json")
    by_arg = A.signing_key(home / "arg" / "node7.key", trusted_keys=home / "arg" / "trusted.json")
    assert by_arg.name == "node7" and by_arg.public_key.keyid != by_env.public_key.keyid
    assert list(A.trusted(home / "arg" / "trusted.json")) == [by_arg.public_key.keyid]
    assert not (home / "home").exists()  # nothing under the default config dir


def test_concurrent_first_uses_make_one_key(home):
    key, lst = home / "k" / "shared.key", home / "k" / "trusted.json"
    code = f"from h3gates.core import attest as A; print(A.signing_key({str(key)!r}, trusted_keys={str(lst)!r}).public_key.keyid)"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True) for _ in range(6)
    ]
    keyids = {p.communicate()[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs) and len(keyids) == 1
    assert list(A.trusted(lst)) == list(keyids)


def test_a_key_others_can_read_is_refused(home):
    signer = A.signing_key(home / "k" / "me.key", trusted_keys=home / "t.json")
    signer.path.chmod(0o644)
    with pytest.raises(AttestationError, match=r"accessible by others \(mode 644\): chmod 600"):
        A.signing_key(signer.path)


def test_a_key_or_trusted_list_under_results_is_refused(home):
    with pytest.raises(AttestationError, match="signing key results/keys/me.key is under results/"):
        A.signing_key("results/keys/me.key", trusted_keys=home / "t.json")
    assert not Path("results").exists()
    signer = A.signing_key(home / "k" / "me.key", trusted_keys=home / "t.json")
    with pytest.raises(AttestationError, match="trusted key list .*is under results/"):
        A.trust(A.public_key_entry(signer), path=Path("results").resolve() / "trusted.json")
    # reading one there is refused too: verify must not trust a list that whoever writes results can edit
    planted = Path("results") / "trusted.json"
    planted.parent.mkdir()
    planted.write_text(json.dumps({"keys": {}}))
    with pytest.raises(AttestationError, match="trusted key list results/trusted.json is under results/"):
        A.trusted(planted)


def test_a_foreign_pem_key_signs_and_is_trusted_by_its_public_pem(home):
    """A CI or cluster key made elsewhere (here ECDSA P-256, as openssl writes it): it signs, but verify
    trusts it only once its public key is imported."""
    private = ec.generate_private_key(ec.SECP256R1())
    key = home / "secrets" / "ci-h200.key"
    key.parent.mkdir()
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key.chmod(0o600)
    pub = home / "ci-h200.pub.pem"
    pub.write_bytes(
        private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    signer = A.signing_key(key)
    assert signer.name == "ci-h200" and signer.public_key.keytype == "ecdsa"
    assert A.trusted() == {}  # an existing key is not trusted implicitly
    env = A.sign(promotion()[0], signer)
    with pytest.raises(AttestationError, match=f"not in the trusted list \\(keyid {signer.public_key.keyid}\\)"):
        A.verify_envelope(env)
    entry = A.import_public(pub)
    assert entry["keyid"] == signer.public_key.keyid and entry["name"] == "ci-h200.pub"
    assert A.verify_envelope(env)[1] == "ci-h200.pub"


def test_an_encrypted_or_garbage_key_is_refused(home):
    bad = home / "k" / "bad.key"
    bad.parent.mkdir()
    bad.write_text("not a key\n")
    bad.chmod(0o600)
    with pytest.raises(AttestationError, match="not an unencrypted PEM private key"):
        A.signing_key(bad)


# ------------------------------------------------------------------ the trusted list
def test_export_and_import_a_public_key(home):
    lab = A.signing_key(home / "lab" / "alice@lab.key", trusted_keys=home / "lab" / "trusted.json")
    out = home / "alice.pub.json"
    entry = A.export_public(out, home / "lab" / "alice@lab.key")
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert json.loads(out.read_text()) == entry
    assert entry["keyid"] == lab.public_key.keyid and entry["name"] == "alice@lab"
    assert {"keytype", "scheme", "keyval"} <= entry.keys() and "private" not in json.dumps(entry).lower()
    stored = A.import_public(out)
    assert stored["name"] == "alice@lab" and A.trusted()[lab.public_key.keyid]["name"] == "alice@lab"
    A.import_public(out, name="alice's lab machine")  # re-trusting renames, keeps one entry
    assert [e["name"] for e in A.trusted().values()] == ["alice's lab machine"]


def test_an_entry_whose_keyid_is_not_its_keys_is_refused(home):
    entry = A.export_public(None, home / "k" / "a.key", trusted_keys=home / "t.json")
    other = A.export_public(None, home / "k" / "b.key", trusted_keys=home / "t.json")
    with pytest.raises(AttestationError, match="is not its key's"):
        A.trust({**entry, "keyid": other["keyid"]})
    with pytest.raises(AttestationError, match="not a public key entry"):
        A.trust({**entry, "keyval": {"public": "00ff"}})
    junk = home / "junk.txt"
    junk.write_text("hello")
    with pytest.raises(AttestationError, match="neither a PEM public key nor a public key entry"):
        A.import_public(junk)


def test_a_trusted_list_others_can_write_is_refused(home):
    A.signing_key()
    A.trusted_path().chmod(0o666)
    with pytest.raises(AttestationError, match="writable by others"):
        A.trusted()


# ------------------------------------------------------------------ sign and verify
def test_round_trip_names_the_signer(home):
    signer = A.signing_key()
    stmt, files, materials = promotion()
    env = A.sign(stmt, signer)
    assert set(env) == {"payload", "payloadType", "signatures"}
    assert env["payloadType"] == "application/vnd.in-toto+json"
    assert [s["keyid"] for s in env["signatures"]] == [signer.public_key.keyid]
    assert payload(env) == stmt
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    assert stmt["predicateType"] == "https://h3gates.dev/promotion/v1"
    assert [s["name"] for s in stmt["subject"]] == sorted(files)
    assert stmt["predicate"]["resolvedDependencies"][0] == {
        "name": "results/tiny/modulate_fusion/r1.json",
        "digest": {"sha256": materials["results/tiny/modulate_fusion/r1.json"]},
    }
    # the signature is over DSSE's pre-authentication encoding, as securesystemslib computes it
    pae = Envelope.from_dict(json.loads(json.dumps(env))).pae()
    assert pae.startswith(b"DSSEv1 28 application/vnd.in-toto+json ")
    kept = json.loads(json.dumps(env))
    got, who = A.verify_envelope(env)
    assert got == stmt and who == signer.name and env == kept  # the caller's dict is not rewritten
    assert A.check_subjects(got, files, materials) == []
    assert A.check_predicate(got, candidate="modulate_fusion", profile="tiny", deployable=False) == []


def test_an_envelope_file_round_trips_and_a_broken_one_is_refused(home):
    signer = A.signing_key()
    env = A.sign(promotion()[0], signer)
    path = A.write_envelope(home / "ws" / "out" / "modulate_fusion.intoto.jsonl", env)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 and len(path.read_text().splitlines()) == 1
    assert A.verify_envelope(path)[1] == signer.name
    assert A.verify_envelope(str(path), A.trusted())[1] == signer.name
    with pytest.raises(AttestationError, match="missing"):
        A.verify_envelope(home / "nope.intoto.jsonl")
    path.write_text(path.read_text()[:-20])
    with pytest.raises(AttestationError, match="not one JSON DSSE envelope"):
        A.verify_envelope(path)
    with pytest.raises(AttestationError, match="not a DSSE envelope"):
        A.verify_envelope({"payload": env["payload"]})


def test_an_unsigned_envelope_is_refused(home):
    A.signing_key()
    env = {**A.sign(promotion()[0], A.signing_key()), "signatures": []}
    with pytest.raises(AttestationError, match=r"unsigned \(no signature\)"):
        A.verify_envelope(env)


def test_every_payload_byte_changed_is_refused(home):
    env = A.sign(promotion()[0], A.signing_key())
    raw = base64.b64decode(env["payload"])
    for i in range(len(raw)):
        forged = bytearray(raw)
        forged[i] ^= 0x01
        with pytest.raises(AttestationError, match="bad signature by .*changed after signing"):
            A.verify_envelope({**env, "payload": base64.b64encode(bytes(forged)).decode()})


def test_every_signature_byte_changed_is_refused(home):
    env = A.sign(promotion()[0], A.signing_key())
    sig = base64.b64decode(env["signatures"][0]["sig"])
    for i in range(len(sig)):
        forged = bytearray(sig)
        forged[i] ^= 0x80
        bad = {**env, "signatures": [{**env["signatures"][0], "sig": base64.b64encode(bytes(forged)).decode()}]}
        with pytest.raises(AttestationError, match="bad signature"):
            A.verify_envelope(bad)


FORGERIES = {
    "deployable": lambda p: p.update(deployable=True),
    "verdict": lambda p: p.update(verdict="promoted"),
    "flag_line": lambda p: p.update(flag_line="H3_NVFP4_MODULATE_FUSION=1"),
    "candidate": lambda p: p.update(candidate="swiglu_fusion"),
    "profile": lambda p: p.update(profile="canonical"),
    "performance_gate_enforced": lambda p: p.update(performance_gate_enforced=True),
    "config_digest": lambda p: p.update(config_digest=sha("another config")),
    "host": lambda p: p.update(host="h200-b"),
    "material": lambda p: p["resolvedDependencies"][3]["digest"].update(sha256=sha("a failed r4")),
    "material dropped": lambda p: p["resolvedDependencies"].pop(),
}


@pytest.mark.parametrize("field", sorted(FORGERIES))
def test_forging_a_field_is_refused(home, field):
    """The issue's forgery (deployable: true, verdict: promoted, the flag line ...) through the
    attestation: any field edited without the key breaks the signature."""
    stmt = promotion()[0]
    env = A.sign(stmt, A.signing_key())
    forged = json.loads(json.dumps(stmt))
    FORGERIES[field](forged["predicate"])
    assert forged != stmt
    with pytest.raises(AttestationError, match="bad signature"):
        A.verify_envelope(reencode(env, forged))


def test_a_forged_subject_or_flag_is_refused(home):
    stmt, files, _ = promotion()
    env = A.sign(stmt, A.signing_key())
    flag = "results/tiny/promotion/modulate_fusion.env"
    # the flag edited to =1 on disk: the signature holds, the flag is not the attested one
    forged_flag = {**files, flag: sha("# written by h3gates promote modulate_fusion\nH3_NVFP4_MODULATE_FUSION=1\n")}
    got, _ = A.verify_envelope(env)
    [reason] = A.check_subjects(got, forged_flag)
    assert reason.startswith(f"subject {flag}: sha256 ") and "is not the attested" in reason
    # ... and its new digest written into the statement: the signature breaks
    forged = json.loads(json.dumps(stmt))
    next(s for s in forged["subject"] if s["name"] == flag)["digest"]["sha256"] = forged_flag[flag]
    with pytest.raises(AttestationError, match="bad signature"):
        A.verify_envelope(reencode(env, forged))


def test_a_key_not_in_the_trusted_list_is_refused_naming_its_keyid(home):
    A.signing_key()
    stranger = other_key(home)
    env = A.sign(promotion()[0], stranger)
    with pytest.raises(
        AttestationError, match=f"signed by a key not in the trusted list \\(keyid {stranger.public_key.keyid}\\)"
    ):
        A.verify_envelope(env)
    with pytest.raises(AttestationError, match="not in the trusted list"):
        A.verify_envelope(A.sign(promotion()[0], A.signing_key()), {})  # an empty list trusts nobody


def test_a_forgery_resigned_by_another_key_is_refused_or_named(home):
    mine = A.signing_key()
    stmt = promotion()[0]
    forged = json.loads(json.dumps(stmt))
    FORGERIES["deployable"](forged["predicate"])
    FORGERIES["flag_line"](forged["predicate"])
    mallory = other_key(home)
    env = A.sign(forged, mallory)
    with pytest.raises(AttestationError, match=f"keyid {mallory.public_key.keyid}"):
        A.verify_envelope(env)
    # the forger's signature under my keyid: my key does not verify it
    claimed = {**env, "signatures": [{**env["signatures"][0], "keyid": mine.public_key.keyid}]}
    with pytest.raises(AttestationError, match=f"bad signature by {mine.name}"):
        A.verify_envelope(claimed)
    # a genuine signature of mine added beside the forger's signs the original payload, not this one
    mixed = {**env, "signatures": env["signatures"] + A.sign(stmt, mine)["signatures"]}
    with pytest.raises(AttestationError, match="bad signature"):
        A.verify_envelope(mixed)
    # once someone trusts mallory's key, verify says whose key signed
    A.trust(A.public_key_entry(mallory))
    assert A.verify_envelope(env)[1] == "mallory@laptop"


def test_a_wrong_payload_type_is_refused(home):
    signer = A.signing_key()
    env = A.sign(promotion()[0], signer)
    with pytest.raises(
        AttestationError, match="payload type 'application/json', expected 'application/vnd.in-toto\\+json'"
    ):
        A.verify_envelope({**env, "payloadType": "application/json"})
    other = Envelope(base64.b64decode(env["payload"]), "application/json", {})  # signed so, by a trusted key
    other.sign(signer)
    with pytest.raises(AttestationError, match="payload type"):
        A.verify_envelope(other.to_dict())


def test_a_statement_not_of_our_predicate_type_is_refused(home):
    signer = A.signing_key()
    stmt = {**promotion()[0], "predicateType": "https://slsa.dev/provenance/v1"}
    with pytest.raises(AttestationError, match="predicate type 'https://slsa.dev/provenance/v1' is not h3gates"):
        A.verify_envelope(A.sign(stmt, signer))
    with pytest.raises(AttestationError, match="not an in-toto Statement v1"):
        A.verify_envelope(A.sign({**stmt, "_type": "https://in-toto.io/Statement/v0.1"}, signer))
    env = Envelope(b"not json", A.PAYLOAD_TYPE, {})
    env.sign(signer)
    with pytest.raises(AttestationError, match="not JSON"):
        A.verify_envelope(env.to_dict())
    broken = promotion()[0]
    del broken["predicate"]["resolvedDependencies"]
    with pytest.raises(AttestationError, match="malformed statement"):
        A.verify_envelope(A.sign(broken, signer))


# ------------------------------------------------------------------ swapped attestations
@pytest.mark.parametrize(
    "other",
    [dict(candidate="swiglu_fusion"), dict(profile="canonical"), dict(deployable=True)],
    ids=["candidate", "profile", "deployable"],
)
def test_an_envelope_swapped_between_promotions_attests_other_files(home, other):
    """A genuine, trusted envelope of another promotion (another candidate, profile, or the deployable
    one) beside this record: the signature holds, the subjects, materials and claims do not."""
    signer = A.signing_key()
    theirs, _, _ = promotion(**other)
    _, files, materials = promotion()
    got, who = A.verify_envelope(A.sign(theirs, signer))
    assert who == signer.name
    reasons = A.check_subjects(got, files, materials)
    assert reasons and all("another promotion's" in r or "not in the attestation" in r for r in reasons)
    [(key, value)] = other.items()
    claims = A.check_predicate(got, candidate="modulate_fusion", profile="tiny", deployable=False)
    assert any(f"the attestation says {key}={value!r}" in c for c in claims)


def test_an_envelope_swapped_between_machines(home):
    """Machine a's promotion checked on machine b: refused until b trusts a's key, then named as a's."""
    a = A.signing_key(home / "a" / "me@a.key", trusted_keys=home / "a" / "trusted.json")
    b = A.signing_key(home / "b" / "me@b.key", trusted_keys=home / "b" / "trusted.json")
    env_a = A.sign(promotion(host="a")[0], a)
    with pytest.raises(AttestationError, match=f"keyid {a.public_key.keyid}"):
        A.verify_envelope(env_a, home / "b" / "trusted.json")
    A.export_public(home / "a.pub.json", a.path)  # on machine a
    A.import_public(home / "a.pub.json", trusted_keys=home / "b" / "trusted.json")  # on machine b
    got, who = A.verify_envelope(env_a, home / "b" / "trusted.json")
    assert who == "me@a" and A.check_predicate(got, host="b") == ["the attestation says host='a', expected 'b'"]
    assert A.verify_envelope(A.sign(promotion(host="b")[0], b), home / "b" / "trusted.json")[1] == "me@b"


def test_check_subjects_names_missing_extra_and_different_files(home):
    stmt, files, materials = promotion()
    names = sorted(files)
    here = {**{n: files[n] for n in names[1:]}, "kernels/extra.cu": sha("x"), names[2]: sha("edited")}
    r1 = "results/tiny/modulate_fusion/r1.json"
    reasons = A.check_subjects(stmt, here, {**materials, r1: sha("rerun")})
    assert reasons == [
        "subject kernels/extra.cu: not in the attestation",
        f"subject {names[0]}: in the attestation but not here (missing, or another promotion's)",
        f"subject {names[2]}: sha256 {sha('edited')[:12]} is not the attested {files[names[2]][:12]} (edited, or another promotion's)",
        f"upstream report {r1}: sha256 {sha('rerun')[:12]} is not the attested {materials[r1][:12]} (edited, or another promotion's)",
    ]


def test_statement_refuses_no_subject_and_bad_digests(home):
    pred = promotion()[0]["predicate"]
    with pytest.raises(ValueError, match="at least one subject"):
        A.statement({}, pred)
    with pytest.raises(ValueError, match="subject a.env: not a sha256"):
        A.statement({"a.env": "ABC"}, pred)
    with pytest.raises(ValueError, match="material r1.json: not a sha256"):
        A.predicate(
            candidate="c",
            profile="tiny",
            flag_line="X=0",
            deployable=False,
            performance_gate_enforced=False,
            verdict="v",
            config_digest=sha("c"),
            materials={"r1.json": "nope"},
        )


def test_the_module_imports_without_torch_or_numpy():
    """Verify imports attest: it must not need the numerics (the same blocking as tests/test_layers.py)."""
    p = import_blocked("h3gates.core.attest")
    assert p.returncode == 0 and p.stdout.startswith("ok"), p.stderr[-3000:]
    assert "h3gates.core.fingerprints" not in p.stdout  # a leaf of the core: errors and fsutil only
