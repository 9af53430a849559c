"""`python -m h3gates keys`: the key that signs this machine's promotion records and the keys `verify`
trusts (h3gates.core.attest).

    python -m h3gates keys show                 # this machine's signing key (created on first use) and the trusted list
    python -m h3gates keys export [--out FILE]  # its public entry, to trust it where records are verified
    python -m h3gates keys trust FILE [--name N]   # trust another machine's key (its exported entry or a PEM public key)
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="h3gates keys", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--key", help="the signing key's path (default: $H3GATES_KEY, else ~/.config/h3gates/keys/<user>@<host>.key)"
    )
    ap.add_argument(
        "--trusted-keys",
        help="the trusted list's path (default: $H3GATES_TRUSTED_KEYS, else ~/.config/h3gates/trusted_keys.json)",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("show", help="the signing key and the trusted keys")
    e = sub.add_parser("export", help="the signing key's public entry (JSON)")
    e.add_argument("--out", help="write it to this file (default: stdout)")
    t = sub.add_parser("trust", help="add a public key (an exported entry or a PEM file) to the trusted list")
    t.add_argument("file")
    t.add_argument("--name", help="the name verify prints for it (default: the entry's, or the file's stem)")
    a = ap.parse_args(argv)
    from h3gates.core import attest
    from h3gates.core.errors import AttestationError

    try:
        if a.cmd == "show":
            signer = attest.signing_key(a.key, trusted_keys=a.trusted_keys)
            entry = attest.public_key_entry(signer)
            print(f"signing key: {signer.path} ({entry['name']}, {entry['scheme']}, keyid {entry['keyid'][:16]})")
            print(f"trusted keys: {attest.trusted_path(a.trusted_keys)}")
            for keyid, k in sorted(attest.trusted(a.trusted_keys).items(), key=lambda kv: kv[1]["name"]):
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
    return 0
