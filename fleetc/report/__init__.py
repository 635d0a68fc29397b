"""Two compiles compared for a reviewer: text, Markdown or JSON, or the compile now against a
what-if scenario, and the message of a ``--commit``.

Pure, split along its algorithms: :mod:`.snapshot` reduces a compile (or a committed output
folder) to what is compared, :mod:`.compare` compares two, :mod:`.review` finds what each side
runs and the dangers a reviewer must decide on, :mod:`.whatif` weighs a scenario; :mod:`.text`,
:mod:`.markdown`, :mod:`.commit` and :mod:`.github` write the result, every name from a file,
policy or scenario escaped by :mod:`.escape`. git and the file system stay in :mod:`fleetc.git`,
which reads this package.
"""

from fleetc.report.commit import commit_message
from fleetc.report.compare import FLEET_WIDE, ObjectDiff, Report, WhatIf, compare, untouched_moves, user_file_diffs
from fleetc.report.github import github_annotations, github_step_summary
from fleetc.report.markdown import GITHUB_COMMENT_LIMIT, MARKDOWN_BUDGET, format_markdown, format_what_if_markdown
from fleetc.report.snapshot import EMPTY, Snapshot, snapshot, snapshot_of_output, time_sliced_units
from fleetc.report.text import as_json, format_text, format_what_if_text, what_if_json
from fleetc.report.whatif import capacity, what_if

__all__ = [
    "EMPTY", "FLEET_WIDE", "GITHUB_COMMENT_LIMIT", "MARKDOWN_BUDGET", "ObjectDiff", "Report", "Snapshot", "WhatIf",
    "as_json", "capacity", "commit_message", "compare", "format_markdown", "format_text", "format_what_if_markdown",
    "format_what_if_text", "github_annotations", "github_step_summary", "snapshot", "snapshot_of_output",
    "time_sliced_units", "untouched_moves", "user_file_diffs", "what_if", "what_if_json",
]
