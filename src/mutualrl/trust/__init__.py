"""The checks a file from a run folder, a shared folder or a peer must pass before anything of it is used.

A run folder, an exchange folder and a checkpoint are data that another process (or another user) may have written,
so what they hold is checked here, below every package that reads them:

- :mod:`.arrow_ipc` — an Arrow IPC file's metadata before pyarrow reads it: no compressed batch (pyarrow would
  inflate it to any size it declares), no block out of bounds; the SEE's reader calls it.
- :mod:`.checkpoint_pickles` — the pickles inside a torch checkpoint: the globals they may name, read from the
  opcodes without running them (before a resume) and enforced at every ``torch.load`` (the pools' loader).
- :mod:`.exchange_binding` — an exchange folder belongs to one run: bound by the launcher, checked by every
  exchange that opens it.

Other checks of the same kind stay beside the one thing they guard, because they are made of that thing's own
rules: strict YAML (``config/yaml_strict.py``, the config's parser and its errors), the user code a run folder may
name (``config/recorded_code.py``, the plugin importer's rules), and the settings a stored run folder may not
choose (``launch/rundir/export_settings.py``, fields of the config a resume re-reads). docs/run-layout.md, "What is
trusted".
"""
