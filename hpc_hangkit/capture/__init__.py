"""Capture: what the live ranks of one node show at a confirmed hang.

- :mod:`hpc_hangkit.capture.ranks`: the rank processes of this host
  (:class:`~hpc_hangkit.capture.ranks.RankProc`, ``discover_ranks``, ``pid_alive``,
  ``request_dumps``), whether an armed rank's process still lives (``rank_liveness``,
  ``node_liveness``: pid reuse and zombies) and its vanished record (``write_vanished``);
- :mod:`hpc_hangkit.capture.orchestrator`: ``capture(ctx)`` runs the steps in order
  (``CaptureContext``, ``CaptureResult``); the steps themselves belong to the sources
  of :mod:`hpc_hangkit.evidence.registry`;
- :mod:`hpc_hangkit.capture.whyfile`: why-files and the one rule for two copies of a
  captured file.

Nothing is imported here, so that a source may use ``capture.ranks`` or
``capture.whyfile`` without pulling in the orchestrator (which imports the sources).
"""
