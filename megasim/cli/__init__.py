"""The `megasim` command: ``main`` (the entry point and the table of commands), one module per command
(``info``, ``simulate``, ``optimize``, ``calibrate``, ``specs``, ``validate``), imported only when its
command runs, and ``common`` (checked argument types, file readers, the progress line)."""
