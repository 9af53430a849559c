"""What several user commands share: the words for config overlays and how a list of them prints."""

from __future__ import annotations

from h3gates.core.config import WORKFLOW_CONFIG

# the Snakefile's own configfile: snakemake always loads it first and merges every --configfile over it
OVERLAYS = f"overlays merged in order over {WORKFLOW_CONFIG}, key by key, as snakemake --configfile merges them"


def files_text(files) -> str:
    return " + ".join(files)
