"""`python -m h3gates keys`: the key that signs this machine's promotion records and the keys `verify`
trusts (h3gates.core.attest).

    python -m h3gates keys show                 # this machine's signing key (created on first use) and the trusted list
    python -m h3gates keys export [--out FILE]  # its public entry, to trust it where records are verified
    python -m h3gates keys trust FILE [--name N]   # trust another machine's key (its exported entry or a PEM public key)

The paths are the ones promotion and verify use: --key / --trusted-keys, else the workflow's
`attestation.key` / `attestation.trusted_keys` (config/config.yaml in the current folder, with the
--configfile overlays merged over it as Snakemake does), else $H3GATES_KEY / $H3GATES_TRUSTED_KEYS, else
~/.config/h3gates/.
"""

from __future__ import annotations

import argparse
import json
import sys

NAME = "keys"


def subparser(sub) -> argparse.ArgumentParser:
    ap = sub.add_parser(
        NAME,
        help="the key that signs promotion records and the keys verify trusts: show, export, trust",
        description="The key that signs this machine's promotion records, and the keys verify trusts.",
    )
    ap.add_argument(
        "--key",
        help="the signing key's path (default: the config's attestation.key, else $H3GATES_KEY, else "
        "$XDG_CONFIG_HOME/h3gates/keys/<user>@<host>.key, ~/.config/h3gates/... without XDG_CONFIG_HOME)",
    )
    ap.add_argument(
        "--trusted-keys",
        help="the trusted list's path (default: the config's attestation.trusted_keys, else $H3GATES_TRUSTED_KEYS, "
        "else $XDG_CONFIG_HOME/h3gates/trusted_keys.json)",
    )
    cfg = argparse.ArgumentParser(add_help=False)
    cfg.add_argument(
        "--configfile",
        nargs="+",
        default=[],
        help="config overlays merged over config/config.yaml, as snakemake's --configfile (their attestation keys)",
    )
    actions = ap.add_subparsers(dest="cmd", required=True)
    actions.add_parser("show", help="the signing key and the trusted keys", parents=[cfg])
    e = actions.add_parser("export", help="the signing key's public entry (JSON)", parents=[cfg])
    e.add_argument("--out", help="write it to this file (default: stdout)")
    t = actions.add_parser(
        "trust", help="add a public key (an exported entry or a PEM file) to the trusted list", parents=[cfg]
    )
    t.add_argument("file")
    t.add_argument("--name", help="the name verify prints for it (default: the entry's, or the file's stem)")
    return ap


def run(a: argparse.Namespace) -> int:
    from h3gates.core import attest
    from h3gates.core.errors import AttestationError, ConfigError

    try:
        key, trusted_keys = _paths(a)
        a.key, a.trusted_keys = key, trusted_keys
        if a.cmd == "show":  # (shows only: the first promotion, or keys export, creates a missing key)
            path = attest.key_path(a.key)
            if path.exists():
                entry = attest.public_key_entry(attest.signing_key(a.key, trusted_keys=a.trusted_keys))
                print(f"signing key: {path} ({entry['name']}, {entry['scheme']}, keyid {entry['keyid'][:16]})")
            else:
                print(f"signing key: {path} (none yet: the first promotion, or keys export, creates it)")
            keys = attest.trusted(a.trusted_keys)
            print(f"trusted keys: {attest.trusted_path(a.trusted_keys)}" + ("" if keys else " (none)"))
            for keyid, k in sorted(keys.items(), key=lambda kv: kv[1]["name"]):
                print(f"  {k['name']:30s} {k['scheme']:16s} {keyid[:16]}")
        elif a.cmd == "export":
            entry = attest.export_public(a.out, a.key, trusted_keys=a.trusted_keys)
            if not a.out:
                print(json.dumps(entry, indent=1))
        else:
            entry = attest.import_public(a.file, a.name, trusted_keys=a.trusted_keys)
            print(f"trusted {entry['name']} (keyid {entry['keyid'][:16]}) in {attest.trusted_path(a.trusted_keys)}")
    except AttestationError as e:
        print(f"h3gates keys: {e}", file=sys.stderr)
        return 1
    except ConfigError as e:
        print(f"h3gates keys: {e}", file=sys.stderr)
        return 2
    return 0


def _paths(a) -> tuple[str | None, str | None]:
    """The signing key's and the trusted list's paths as promotion finds them: the arguments, else the
    workflow config's `attestation` (its raw keys: the rest of the config is not validated here), else
    None (attest then reads the environment, then the default)."""
    from pathlib import Path

    from h3gates.core.config import WORKFLOW_CONFIG, configfiles, merge, read_config_file

    att: dict = {}
    if a.configfile or Path(WORKFLOW_CONFIG).is_file():
        merged: dict = {}
        for f in configfiles(a.configfile):
            merged = merge(merged, read_config_file(f))
        att = merged.get("attestation") or {}
    return a.key or att.get("key"), a.trusted_keys or att.get("trusted_keys")
