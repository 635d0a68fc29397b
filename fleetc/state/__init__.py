"""fleetc's own state in the output folder, read back by the next compile, ``explain``, ``diff``
and ``--commit``: one codec per file. (``out/.fleetc/files`` and ``out/.fleetc/render`` are
:mod:`fleetc.emit`'s and :mod:`fleetc.render.record`'s.)"""
