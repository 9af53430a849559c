"""`python -m h3gates`: a job of the workflow (h3gates.job: what its rules and rungs run) goes to the job
runner without importing the user's CLI; anything else to the CLI (h3gates.cli)."""

import sys

from h3gates import job

if sys.argv[1:2] and sys.argv[1] in job.JOBS:
    sys.exit(job.main())

from h3gates.cli import main  # noqa: E402 (a job never imports the CLI)

sys.exit(main())
