"""``python -m fleetc``: the same as the ``fleetc`` command."""

from .cli import main

main()
