"""Several processes of one ``cloudqueue run``: the supervisor of ``--processes N`` and the
development reloader that restarts them."""
