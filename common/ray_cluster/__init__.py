"""datatrove's Ray executor sized to the cluster, with progress and loud failures, and Ray token authentication:
what every CLI that runs stages on Ray shares (``pipelines.run``, ``dedup.run``). Imported only when
``--executor ray`` is asked for."""
