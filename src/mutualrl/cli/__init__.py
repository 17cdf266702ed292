"""The ``mutualrl`` command line (Typer). One module per subcommand."""
