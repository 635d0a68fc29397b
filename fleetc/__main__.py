"""``python -m fleetc``: the same as the ``fleetc`` command."""

from fleetc.cli import main

main()
