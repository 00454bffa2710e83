"""The documentation site's generated pages: reference and performance, built from the code.

``docsite.hooks`` is the MkDocs hook file (``hooks:`` in ``mkdocs.yml``). Each page that shows
generated material holds a marker, ``<!-- generated:NAME -->`` (or a benchmark block,
``<!-- bench:NAME -->`` ... ``<!-- /bench:NAME -->``), which the build replaces with what
``docsite.generated.render(NAME)`` returns: the settings from the settings model, the command
line from the click commands, the metrics from the Prometheus registry, the errors and poison
reasons from their definitions, and the benchmark tables from the committed results. Nothing
generated is committed, so nothing generated can drift.
"""
