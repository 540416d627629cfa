"""Everything that runs on Ray: the datatrove executor for the stages, plain Ray tasks for the tokenizer and
mixture chain, token authentication. Imported only when ``--executor ray`` is asked for."""
