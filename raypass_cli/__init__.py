"""The ``raypass`` command line, a package of its own on top of the library.

It sits above ``passinfra`` and ``scheduler`` (it imports both; neither, nor ``workers``,
imports it), so the library stays free of argument parsing and terminal output,
and Ray workers never need it. One module per subcommand or group of small ones:

- ``main``: the parser, dispatch and exit statuses (``main.main`` is the ``raypass``
  entry point);
- ``compile``, ``run``, ``plan``, ``demo``: the subcommands of those names;
- ``tools``: the small subcommands ``passes``, ``replay`` and ``bench``;
- ``common``: model loading, option parsing, the PassContext and Scheduler from options;
- ``progress``, ``report``, ``trace``: the progress display, timing tables and traces;
- ``forkserver``: the warm driver a warm pool keeps, which runs ``raypass compile``
  commands in forked children without the interpreter's start-up and imports;
  ``process_start``: when the command the user typed began.
"""
