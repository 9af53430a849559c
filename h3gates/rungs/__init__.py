"""The eight rungs (ladder.md), one module each (`r1_adversarial` ... `r8_profiler`), each comparing real
bytes against the reference and writing a report that can fail. A numeric failure is a verdict, not
a crash: the CLI exits 0 and the pass-token rule stops the climb. A candidate that raises is a
failing verdict too (a schema-valid report naming the exception, `crash.py`); an exception raised by
the ladder's own code is not, and the job fails loudly. `ladder.run` runs one.

Also here: the shared baseline artifacts (`artifacts`, `r8_baseline`), the rung cases (`inputs`,
`path_cases`), Nsight Compute (`nsight`), `replay` and the timing `plots`. This package's __init__
imports nothing, so a module of it (the artifacts' computation) carries only its own imports.
"""
