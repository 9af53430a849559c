"""The user's commands, one module each (as asv's `commands/`): each declares its subparser
(`subparser(sub)`: name, help, arguments) and its `run(args) -> exit status`; h3gates.cli lists them
and dispatches. The workflow's own commands are h3gates.job."""
