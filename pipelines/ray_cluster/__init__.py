"""The chain's tokenizer and mixture on Ray (``chain``); the stages' executor and token auth are in
``common/ray_cluster/`` (``dedup.run`` uses them too). Imported only when ``--executor ray`` is asked for."""
