"""Promotion records, `verify` and `status`: whether a candidate's reports still stand.

Every check compares a report with `provenance.provenance(ctx)` of the current tree and config, the
same function the rung used to write it. A record stores the resolved configuration it was made with
(all overlays merged) and the digest of its flag file; `verify <record>` re-checks against that
configuration, and names what changed when the caller's configuration differs. A refusal moves the
reports that no longer stand (stale, edited, invalid) aside, so that the next run recomputes exactly
those rungs, and names the one command that does it. No torch import.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import sys
import time
from pathlib import Path

from h3gates.core import derive, registry, report
from h3gates.core import pins as P
from h3gates.core.config import diff, enforce_perf, validate_config
from h3gates.core.context import RungContext, candidate_config, gemm_reference, results_name_of
from h3gates.core.errors import ConfigError, Refusal, RegistryError, ReportError
from h3gates.core.fingerprints import ROOT, file_sha256, prefetch_sha256, provenance
from h3gates.core.heal import quarantine, same_command  # noqa: F401 (same_command: re-exported)
from h3gates.core.jobs import configured_device
from h3gates.core.outputs import PER_BLOCK, RUNG_NAMES, report_paths
from h3gates.core.tokens import revoke

RECORD_SCHEMA_VERSION = 3


def check_report(
    path, candidate: str, rung: int, expected: dict, trusted: dict | None = None, layout: tuple | None = None
) -> tuple[str, list[str], dict | None]:
    """-> (state, reasons, doc): state pass / fail / stale / invalid / missing against the expected
    provenance (kernel fingerprint, code fingerprint, config digest). Invalid: not schema-valid, edited
    (content_sha256), a verdict its measurements do not give (h3gates.core.derive), or, with `trusted`
    (the trusted keys), not signed by its job as the layout says (h3gates.core.links; `layout`: the
    (upstream reports, artifacts) the step reads)."""
    p = Path(path)
    if not p.exists():
        return "missing", [f"{p}: missing"], None
    try:
        d = report.read(p)
    except ReportError as e:
        return "invalid", [str(e)], None
    if d["candidate"] != candidate or d["rung"] != rung:
        return (
            "invalid",
            [f"{p}: is a rung {d['rung']} report of {d['candidate']}, expected rung {rung} of {candidate}"],
            d,
        )
    bad = [f"{p}: {r}" for r in derive.check(d)]
    if trusted is not None:
        from h3gates.core import links

        bad += links.check_report_chain(p, d, trusted, *(layout or (None, None)))
    if bad:  # (with any broken link of the digest chain: what an edited artifact also is)
        return "invalid", bad + [r for r in _chain(p, d) if r not in bad], d
    if d["verdict"] != "pass":
        return "fail", [f"{p}: verdict fail: {d['reasons'][0]}"], d
    reasons = []
    now, then = expected["kernel_fingerprint"], d["kernel_fingerprint"]
    for f in sorted(set(now) | set(then)):
        if f not in then:
            reasons.append(f"{p}: stale: kernel {f} is used now but was not when the gate ran")
        elif f not in now:
            reasons.append(f"{p}: stale: kernel {f} was used when the gate ran but is not now")
        elif now[f] != then[f]:
            reasons.append(
                f"{p}: stale: kernel {f} changed since the gate ran (source digest {then[f][:12]} -> {now[f][:12]})"
            )
    if d["code_fingerprint"] != expected["code_fingerprint"]:
        reasons.append(f"{p}: stale: h3gates modules changed since the gate ran")
    if d["config_digest"] != expected["config_digest"]:
        reasons.append(f"{p}: stale: config changed since the gate ran")
    reasons += _chain(p, d)
    return ("stale" if reasons else "pass"), reasons, d


def _chain(p, d: dict) -> list[str]:
    """The report's upstream digests against the files now: the digest chain."""
    reasons = []
    for up, h in d["upstream"].items():
        try:
            if file_sha256(up, cached=True) != h:
                reasons.append(f"{p}: digest chain broken: upstream {up} changed after this gate ran")
        except FileNotFoundError:
            reasons.append(f"{p}: upstream {up} is missing")
    return reasons


NOT_HERE = "n/a"  # status's state of every rung of a candidate not climbed on this device


def check_candidate(config: dict, candidate: str):
    """Every report of a candidate against the current tree and config -> ({path: (state, reasons,
    doc)}, reasons); a missing kernel source is a reason of its own."""
    from h3gates.core import links
    from h3gates.core.errors import AttestationError

    results, reasons = {}, []
    try:
        trusted = links.trusted_keys(config)
    except AttestationError as e:
        return {}, [str(e)]
    profile, blocks, name = config["profile"], config["blocks"], results_name_of(config, candidate)
    rungs = [
        (rung, plist, RungContext.from_config(config, candidate, rung))
        for rung, plist in report_paths(profile, name, blocks).items()
    ]
    _prefetch(rungs, blocks)
    for rung, plist, ctx in rungs:
        try:
            expected = provenance(ctx)
        except FileNotFoundError as e:
            return {}, [f"kernel source {e.filename} is missing"]
        except RegistryError as e:
            return {}, [str(e)]
        for p, block in zip(plist, blocks if rung in PER_BLOCK else [None]):
            layout = (links.expected_upstream(profile, name, rung, block, blocks), ctx.workflow_artifacts(block))
            results[p] = check_report(p, candidate, rung, expected, trusted, layout)
            reasons += [r for r in results[p][1] if r not in reasons]  # (a shared artifact's, once)
    return results, reasons


def _prefetch(rungs, blocks) -> None:
    """The large files the existing reports' digest chains name (their upstream artifacts and block captures),
    hashed at once in threads before the reports are checked one by one
    (h3gates.core.fingerprints.prefetch_sha256); a missing or unreadable report adds none."""
    paths = []
    for rung, plist, ctx in rungs:
        for p, block in zip(plist, blocks if rung in PER_BLOCK else [None]):
            try:
                paths += list(json.loads(Path(p).read_text()).get("upstream") or {})
            except (OSError, ValueError, AttributeError, TypeError):
                continue  # (the check itself says what is wrong with it)
            paths += ctx.workflow_artifacts(block)
    prefetch_sha256(paths)


def invocation(process=None) -> str:
    """The options of the snakemake run this process is (the verdict table, from the run's own hooks) or is a job
    of, that say how and where it runs and what it computes (--cores / --jobs, --resources, --profile,
    --workflow-profile, --executor, --config, --sdm; the targets and --configfile are the fix's own), read from the
    command lines of this process and its ancestors (psutil, which snakemake itself depends on: Linux and macOS
    alike), so that the refusal's fix line is the user's own command; `--cores 1` where no snakemake is found (a
    direct CLI call, a cluster job) or the process table cannot be read."""
    try:
        import psutil
    except ImportError:
        return "--cores 1"
    try:
        me = process or psutil.Process()
        for proc in (me, *me.parents()):
            argv = proc.cmdline()
            if any(Path(a).name == "snakemake" for a in argv[:3]):
                return _run_options(argv) or "--cores 1"
    except psutil.Error:  # a process gone or not readable: the hint falls back, the refusal stands
        pass
    return "--cores 1"


# the run's options a fix repeats: each with its one value, or (MANY) with every word after it up to the next option
# (the fix puts them after its target: snakemake's many-valued options would take a target after them as a value)
ONE = ("--profile", "--workflow-profile", "--executor", "-e")
MANY = ("--resources", "--res", "--config", "-C", "--sdm", "--software-deployment-method", "--deployment-method",
        "--deployment")  # fmt: skip


def _run_options(argv: list[str]) -> str:
    kept, i = [], 0
    while i < len(argv):
        a = argv[i]
        name = a.split("=", 1)[0]
        if name in ("--cores", "-c", "--jobs", "-j") or re.fullmatch(r"-[cj]\d+", a):
            kept.append(a)
            if (
                "=" not in a
                and not re.fullmatch(r"-[cj]\d+", a)
                and i + 1 < len(argv)
                and re.fullmatch(r"\d+|all|unlimited", argv[i + 1])
            ):
                kept.append(argv[i + 1])
                i += 1
        elif name in MANY:
            kept.append(a)
            while (
                i + 1 < len(argv)
                and not argv[i + 1].startswith("-")
                and ("=" in argv[i + 1] or name not in ("--resources", "--res", "--config", "-C"))
            ):  # (every word up to the next option, but a target after key=value words is not one of them)
                kept.append(argv[i + 1])
                i += 1
        elif name in ONE:
            kept.append(a)
            if "=" not in a and i + 1 < len(argv):
                kept.append(argv[i + 1])
                i += 1
        i += 1
    return " ".join(shlex.quote(k) for k in kept)


def _trusted(config: dict) -> dict | None:
    from h3gates.core import links
    from h3gates.core.errors import AttestationError

    try:
        return links.trusted_keys(config)
    except AttestationError:
        return None


def _fix(candidate: str, configfiles, moved, extra: str = "") -> str:
    """The command that climbs `candidate` again under these config files (`extra`: options before them, as
    --configfile takes every word after it)."""
    from h3gates.core.config import overlays

    configfiles = overlays(configfiles)
    cfg = " --configfile " + " ".join(configfiles) if configfiles else ""
    cmd = f"snakemake promote_{candidate}{extra} {invocation()}{cfg}"  # (the target first: see MANY)
    return f"{cmd}   (reruns the {len(moved)} report(s) moved aside and what depends on them)" if moved else cmd


def flag_text(candidate: str, record: str, deployable: bool) -> str:
    spec = registry.get(candidate)
    return (
        f"# written by h3gates promote {candidate}; check with: python -m h3gates verify {record}\n"
        + ("" if deployable else "# REHEARSAL (profile not deployable): do not deploy\n")
        + f"{spec.flag}={1 if deployable else 0}\n"
    )


def _resolved(config: dict, candidate: str) -> dict:
    """The configuration a record stands on, with the device the gates ran on (not `auto`: verify on a
    host without a GPU must check the CUDA kernels the gates ran, not the CPU ones)."""
    return {**candidate_config(config, candidate), "device": configured_device(config)}


def attestation_path(record) -> str:
    return str(Path(record).with_suffix(".intoto.jsonl"))


def facts(config: dict, docs: dict) -> dict:
    """What a promotion may claim, derived from its resolved config and the reports it rests on, never from
    a record's own summary fields: whether the profile may deploy, whether rung 4 was enforced at every
    gated block (and with which attempts), whether rung 8 holds Nsight Compute captures of both sides
    (required on a GPU), and so whether the flag may say 1."""
    profile_deployable = config["profile"] in config["deployable_profiles"]
    gates = {
        d["block"]: (d.get("timing") or {}).get("performance_gate") or {} for d in docs.values() if d and d["rung"] == 4
    }
    enforced = enforce_perf(config) and bool(gates) and all(g.get("enforced") for g in gates.values())
    attempts = {
        str(b): {
            "attempt": g.get("attempt"),
            "max_attempts": g.get("max_attempts"),
            "decision": g.get("decision"),
            "interval": g.get("interval"),
            "mode": g.get("mode"),
        }
        for b, g in sorted(gates.items())
    }
    r8 = next((d for d in docs.values() if d and d["rung"] == 8), None)
    ns = ((r8 or {}).get("timing") or {}).get("nsight") or {}
    on_gpu = config["device"] == "cuda" or (r8 or {}).get("device", {}).get("device_type") == "cuda"
    held = bool(ns) and all((ns.get(side) or {}).get("available") for side in ("baseline", "candidate"))
    why_not = []
    if not profile_deployable:
        why_not.append(
            f"profile {config['profile']} is a rehearsal (deployable profiles: {config['deployable_profiles']})"
        )
    if not enforced:
        why_not.append("the performance gate was not enforced at every gated block (timing.enforce)")
    if on_gpu and not held:
        why_not.append("rung 8 holds no Nsight Compute capture of both sides (ncu missing or failed)")
    return {
        "profile_deployable": profile_deployable,
        "enforced": enforced,
        "attempts": attempts,
        "rung8_capture": {"required": on_gpu, "held": held},
        "deployable": not why_not,
        "why_not": why_not,
    }


def _verdict(f: dict) -> str:
    return "promoted" if f["deployable"] else "promoted (rehearsal, not deployable)"


def _signer(config: dict):
    from h3gates.core import attest

    a = config.get("attestation") or {}
    first = not attest.key_path(a.get("key")).exists()
    signer = attest.signing_key(a.get("key"), trusted_keys=a.get("trusted_keys"))
    if first:
        print(
            f"h3gates: created the signing key {signer.path} (first use; it signs this machine's promotion records "
            f"and is trusted here; python -m h3gates keys show, docs/results.md)",
            file=sys.stderr,
        )
    return signer


def _subjects(flag: str, record: str, kernels: dict) -> dict:
    """The attested files: the flag and the record by their bytes, the kernel sources by their behaviour
    digests (the record's kernel_fingerprint: a comment edit leaves a promotion standing)."""
    return {flag: file_sha256(flag), record: file_sha256(record), **_sources(kernels)}


def _sources(kernels: dict) -> dict:
    from h3gates.core import attest

    return {f: attest.source_digest(h) for f, h in kernels.items()}


def promote(config: dict, candidate: str, record: str, flag: str, configfiles: list[str]) -> None:
    revoke(flag)
    results, reasons = check_candidate(config, candidate)
    if reasons:
        revoke(record, attestation_path(record))
        moved = quarantine(results, results_name_of(config, candidate), config["profile"], _trusted(config))
        raise Refusal(reasons, fix=_fix(candidate, configfiles, moved))
    docs = {p: d for p, (_, _, d) in results.items()}
    pins, disagree = P.agree(docs)
    if disagree or (reasons := P.check(pins)):
        # the reports hold only where they were gated: move them aside so that rerunning the gates
        # here makes reports (and pins) of this machine, instead of refusing the same ones again
        revoke(record, attestation_path(record))
        moved = quarantine(
            {p: ("stale", [], d) for p, d in docs.items()}, results_name_of(config, candidate), config["profile"]
        )
        raise Refusal(disagree or reasons, fix=_fix(candidate, configfiles, moved))
    f = facts(config, docs)
    if f["profile_deployable"] and not f["deployable"]:  # deployable means enforced, and on a GPU captured
        revoke(record, attestation_path(record))
        # rung 8's report without its capture goes aside: nothing it was made from changes when ncu appears, so the
        # same command would not rerun it (the config check refuses a deployable profile that does not enforce)
        r8 = {q: ("stale", [], d) for q, d in docs.items() if d and d["rung"] == 8}
        uncaptured = f["rung8_capture"]["required"] and not f["rung8_capture"]["held"]
        moved = quarantine(r8, results_name_of(config, candidate), config["profile"]) if uncaptured else []
        raise Refusal(
            [f"{candidate} on deployable profile {config['profile']}: {w}" for w in f["why_not"]],
            fix="a deployable profile needs timing.enforce true and, on a GPU, Nsight Compute for rung 8: ncu on PATH (or "
            "named by H3GATES_NCU); then " + _fix(candidate, configfiles, moved),
        )
    notes = [f"not deployable: {w}" for w in f["why_not"]]
    notes += sorted({n for d in docs.values() for n in d.get("notes", [])})
    notes += [
        f"{p}: {d['timing']['performance_gate']['note']}"
        for p, d in docs.items()
        if (d.get("timing") or {}).get("performance_gate", {}).get("note")
    ]
    any_doc = next(iter(docs.values()))
    text = flag_text(candidate, record, f["deployable"])
    resolved = _resolved(config, candidate)
    rec = {
        "schema_version": RECORD_SCHEMA_VERSION,
        "candidate": candidate,
        "flag": registry.get(candidate).flag,
        "profile": config["profile"],
        "deployable": f["deployable"],
        "device": any_doc["device"],
        "reference": any_doc["reference"],
        "reports": {p: file_sha256(p) for p in docs},
        "verdicts": {p: d["verdict"] for p, d in docs.items()},
        "kernel_fingerprint": {k: h for d in docs.values() for k, h in d["kernel_fingerprint"].items()},
        "config_digest": {str(r): RungContext.from_config(config, candidate, r).config_digest() for r in RUNG_NAMES},
        "config": {"files": list(configfiles or []), "resolved": resolved},
        "flag_file": {
            "path": flag,
            "sha256": hashlib.sha256(text.encode()).hexdigest(),
            "line": text.strip().splitlines()[-1],
        },
        "pins": pins,
        "performance_gate_enforced": f["enforced"],
        "performance_gate": {"attempts": f["attempts"]},
        "rung8_capture": f["rung8_capture"],
        "verdict": _verdict(f),
        "notes": notes,
        "promoted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    report.write(record, rec, schema="promotion")
    report.write_text(flag, text)
    _attest(config, rec, record, flag)


def _attest(config: dict, rec: dict, record: str, flag: str) -> None:
    """The record as a signed in-toto attestation beside it (<record>.intoto.jsonl): subjects the flag, the
    record and the candidate's sources; materials every upstream report."""
    from h3gates.core import attest
    from h3gates.core.fingerprints import digest

    signer = _signer(config)
    pred = attest.predicate(
        candidate=rec["candidate"],
        profile=rec["profile"],
        flag_line=rec["flag_file"]["line"],
        deployable=rec["deployable"],
        performance_gate_enforced=rec["performance_gate_enforced"],
        verdict=rec["verdict"],
        config_digest=digest(rec["config"]["resolved"]),
        materials=rec["reports"],
        attempts=rec["performance_gate"]["attempts"],
        rung8_capture=rec["rung8_capture"],
    )
    stmt = attest.statement(_subjects(flag, record, rec["kernel_fingerprint"]), pred)
    attest.write_envelope(attestation_path(record), attest.sign(stmt, signer))


def _check_attestation(rec: dict, record: str, flag: str, f: dict, config: dict) -> tuple[list[str], str | None]:
    """Reasons the record's signed attestation does not stand (unsigned, untrusted, tampered, about other
    files, claiming what the config and reports do not) -> (reasons, the signer's name)."""
    from h3gates.core import attest
    from h3gates.core.errors import AttestationError
    from h3gates.core.fingerprints import digest

    path = attestation_path(record)
    trusted = attest.trusted((config.get("attestation") or {}).get("trusted_keys"))
    try:
        stmt, who = attest.verify_envelope(path, trusted)
    except AttestationError as e:  # (its message names the file already where it is about the file)
        return [f"attestation {e}" if str(e).startswith(path) else f"attestation {path}: {e}"], None
    reasons = [
        f"attestation {path}: {r}"
        for r in attest.check_subjects(
            stmt,
            _subjects(flag, record, rec["kernel_fingerprint"])
            if Path(flag).exists()
            else {record: file_sha256(record), **_sources(rec["kernel_fingerprint"])},
            materials=rec["reports"],
        )
    ]
    reasons += [
        f"attestation {path}: {r}"
        for r in attest.check_predicate(
            stmt,
            candidate=rec["candidate"],
            profile=config["profile"],
            deployable=f["deployable"],
            performance_gate_enforced=f["enforced"],
            verdict=_verdict(f),
            flag_line=f"{registry.get(rec['candidate']).flag}={1 if f['deployable'] else 0}",
            config_digest=digest(rec["config"]["resolved"]),
        )
    ]
    return reasons, who


def verify(
    record: str,
    revoke_flag: bool = False,
    flag: str | None = None,
    config: dict | None = None,
    configfiles=None,
    heal: bool = False,
) -> dict:
    """Re-check a promotion record now, deriving everything it may claim from its resolved config and the
    reports it rests on (never from its own summary fields): every report present, schema-valid,
    passing, unedited, produced from the current kernel sources and h3gates modules and from the
    record's configuration (or `config`, whose differences are named); digest chain intact; the record's
    signed attestation made by a trusted key and about exactly these files; the flag file exactly the
    text the derived facts give (a rehearsal profile can never say 1). With revoke_flag a refusal deletes
    the flag; with heal it moves what no longer stands aside (the workflow's promote_<candidate> does
    both). Returns the record with `verified`: the derived facts and the signer."""
    try:
        rec = report.read(record, schema="promotion")
    except ReportError as e:
        revoke(flag if revoke_flag else None)
        raise Refusal([str(e)]) from None
    flag = flag or rec["flag_file"]["path"]
    reasons = []
    resolved = rec["config"]["resolved"]
    if config is not None:
        changed = diff(resolved, _resolved(config, rec["candidate"]))
        if changed:
            reasons += [f"config changed since the promotion: {c}" for c in changed]
    try:
        cfg = validate_config(resolved)
    except ConfigError as e:  # e.g. a kernel source of the record deleted since: refused, and the flag revoked
        if revoke_flag:
            revoke(flag)
        raise Refusal(reasons + [line.strip() for line in str(e).splitlines()[1:]]) from None
    made, here = ((rec.get("reference") or {}).get("gemm") or {}).get("reference"), gemm_reference(cfg)
    if made != here:  # (its reports would also read as stale: the reference is part of every rung's context)
        reasons.append(
            f"the record was made under the {made or 'unnamed'} GEMM reference, this machine's is {here}: "
            "its bytes were gated against another reference (docs/hardware.md); promote here"
        )
    results, more = check_candidate(cfg, rec["candidate"])
    reasons += more
    for p, h in rec["reports"].items():
        if p in results and results[p][0] == "pass" and file_sha256(p) != h:
            reasons.append(f"{p}: differs from the report the record was made from")
    if set(rec["reports"]) != set(results):
        reasons.append(f"the record lists {len(rec['reports'])} reports, the configuration's ladder has {len(results)}")
    docs = {p: d for p, (_, _, d) in results.items() if d is not None}
    gated, disagree = P.agree(docs)
    reasons += disagree
    if gated != (rec.get("pins") or {}):
        reasons.append("the record's pins are not the pins its reports were gated with")
    reasons += P.check(gated)
    f = facts(cfg, docs)
    for field, want in (
        ("deployable", f["deployable"]),
        ("verdict", _verdict(f)),
        ("performance_gate_enforced", f["enforced"]),
        ("profile", cfg["profile"]),
        ("candidate", rec["candidate"]),
    ):
        if rec.get(field) != want:
            reasons.append(
                f"the record says {field}={rec.get(field)!r}, but its config and reports give {want!r}: edited or forged"
            )
    if f["profile_deployable"] and not f["deployable"]:
        reasons += [f"deployable profile {cfg['profile']}: {w}" for w in f["why_not"]]
    want_text = flag_text(rec["candidate"], record, f["deployable"])
    fp = Path(flag)
    if not fp.exists():
        reasons.append(f"flag {flag} is missing (it should hold {want_text.strip().splitlines()[-1]})")
    elif fp.read_text() != want_text:
        reasons.append(
            f"flag {flag} is not the text the record's config and reports give (it should end with "
            f"{want_text.strip().splitlines()[-1]}): edited or forged"
        )
    more, who = _check_attestation(rec, record, flag, f, cfg)
    untrusted_only = not reasons and more and all("not in the trusted list" in r for r in more)
    links_untrusted = bool(reasons) and all("not in the trusted list" in r for r in reasons + more)
    reasons += more
    if reasons:
        if revoke_flag:
            revoke(flag)
        moved = (
            quarantine(results, results_name_of(cfg, rec["candidate"]), rec["profile"], _trusted(cfg)) if heal else []
        )
        fix = _fix(rec["candidate"], rec["config"]["files"], moved)
        if untrusted_only:  # everything stands but whose key signed: trust that key, or sign it anew here
            fix = (
                "trust the key that signed it (where that key is: python -m h3gates keys export --out FILE; "
                f"here: python -m h3gates keys trust FILE), or promote it here, signed with this machine's key: "
                f"{fix} --forcerun promotion_record"
            )
            raise Refusal(reasons, fix=fix)
        if not heal:
            # a plain verify: first what the workflow's own verify does (promote_<candidate>: --revoke --heal), else
            # the next run would only do that and refuse, and the one after it rerun: what no longer stands moved
            # aside, the flag gone (a missing report alone reruns nothing while the record and flag exist)
            fix = f"python -m h3gates verify --revoke --heal {shlex.quote(record)}, then {fix}"
        if links_untrusted:  # reports signed by another machine's jobs: trust its key, or recompute them here
            fix = (
                "trust the key that signed them (where that key is: python -m h3gates keys export --out FILE; "
                f"here: python -m h3gates keys trust FILE), or recompute them here: {fix}"
            )
        raise Refusal(reasons, fix=fix)
    return {**rec, "verified": {**f, "signed_by": who, "results_name": results_name_of(cfg, rec["candidate"])}}


def under_current(rec: dict) -> tuple[str, list[str]]:
    """Whether a record that verifies under its own configuration still stands under the configuration its
    files give now (the same files, re-read) and the current tree: ('stands', []) or ('stale', reasons),
    what `status` says of its reports; ('unknown', [why]) where the files no longer load."""
    from h3gates.core.config import configfiles, load_config

    files = rec["config"]["files"]
    try:
        now = load_config(configfiles(files))
    except ConfigError as e:
        return "unknown", [
            f"its config files {' + '.join(files) or '(none)'} do not load now: {str(e).splitlines()[0]}"
        ]
    reasons = [
        f"config changed since the promotion: {c}"
        for c in diff(rec["config"]["resolved"], _resolved(now, rec["candidate"]))
    ]
    _, more = check_candidate(now, rec["candidate"])
    reasons += more
    return ("stale" if reasons else "stands"), reasons


def revoke_if_wrong(record: str, flag: str) -> bool:
    """After a refusal: delete the flag if its record no longer verifies (proved wrong under its own
    config), and only then -> whether it was revoked."""
    if not Path(record).exists():
        revoke(flag)
        return True
    try:
        verify(record, revoke_flag=True, flag=flag)
    except Refusal:
        return True
    return False


def status(config: dict) -> list[dict]:
    """candidate x rung: pass / fail / missing / stale / invalid, with the reason of each; n/a for every rung of
    an enabled candidate the workflow does not climb on this configuration's device (no implementation for it, a
    need it does not meet: h3gates.core.config.climbable), with that reason (promote_<name> refuses with it)."""
    from h3gates.core.config import climbable, enabled

    rows = []
    _, left_out = climbable(config)
    for cand in enabled(config):
        name = results_name_of(config, cand)
        if cand in left_out:
            na = {"state": NOT_HERE, "reason": left_out[cand]}
            rows.append(
                {"candidate": cand, "results_name": name, "rungs": dict.fromkeys(RUNG_NAMES, na), "attempts": {}}
            )
            continue
        results, kernel_missing = check_candidate(config, cand)
        row = {"candidate": cand, "results_name": name, "rungs": {}}
        for rung, plist in report_paths(config["profile"], name, config["blocks"]).items():
            states = [results[p][:2] if p in results else ("invalid", kernel_missing) for p in plist]
            worst = next(s for s in ("fail", "invalid", "stale", "missing", "pass") if any(x[0] == s for x in states))
            reason = next((r[0] for s, r in states if s == worst and r), "")
            row["rungs"][rung] = {"state": worst, "reason": reason}
        row["attempts"] = {  # of the rung-4 reports that stand now (a stale one's decision is not this tree's)
            str(d["block"]): {k: g.get(k) for k in ("attempt", "max_attempts", "decision", "mode", "enforced")}
            for state, _, d in (
                results.get(p, (None, None, None)) for p in report_paths(config["profile"], name, config["blocks"])[4]
            )
            if d and state in ("pass", "fail") and (g := (d.get("timing") or {}).get("performance_gate"))
        }
        rows.append(row)
    return rows


def attempt_text(a: dict) -> str:
    """One block's rung-4 decision and its attempt, as status and verify print it: "pass at attempt 1 of at
    most 2" (a block not timed or refused has no attempt)."""
    if a.get("attempt") is None:
        return str(a["decision"])
    return f"{a['decision']} at attempt {a['attempt']} of at most {a['max_attempts']}"


def format_status(rows) -> str:
    names = {r: f"r{r} {RUNG_NAMES[r]}" for r in RUNG_NAMES}
    width = max(len(n) for n in names.values())
    w = max([18] + [len(r["results_name"]) for r in rows])
    head = f"{'candidate':{w}s} " + " ".join(f"{names[r]:{width}s}" for r in RUNG_NAMES)
    lines = [head, "-" * len(head)]
    reasons = []
    for row in rows:
        lines.append(
            f"{row['results_name']:{w}s} " + " ".join(f"{row['rungs'][r]['state']:{width}s}" for r in RUNG_NAMES)
        )
        # a reason that already names its state ("<report>: missing", "<report>: stale: ...") is not prefixed with it again
        if row.get("attempts"):
            reasons.append(
                f"  {row['results_name']} rung 4: "
                + ", ".join(
                    f"block {b} {attempt_text(a)} ({a['mode'] or '-'}"
                    + ("" if a["enforced"] else ", not enforced")
                    + ")"
                    for b, a in row["attempts"].items()
                )
            )
        if all(v["state"] == NOT_HERE for v in row["rungs"].values()):  # one reason for the row, not one per rung
            reasons.append(f"  {row['results_name']}: {NOT_HERE}: {row['rungs'][min(row['rungs'])]['reason']}")
            continue
        reasons += [
            f"  {row['results_name']} r{r}: "
            + (v["reason"] if f": {v['state']}" in v["reason"] else f"{v['state']}: {v['reason']}")
            for r, v in row["rungs"].items()
            if v["reason"]
        ]
    return "\n".join(lines + ([""] + reasons if reasons else []))


__all__ = [
    "ROOT",
    "Refusal",
    "check_candidate",
    "check_report",
    "format_status",
    "promote",
    "quarantine",
    "revoke",
    "status",
    "verify",
]
