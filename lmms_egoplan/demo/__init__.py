"""The offline demo, a wing above the product: ``smoke`` (``lmms-egoplan smoke``), its kit (``kit``: tiny
random-weight checkpoints, synthetic media, a loopback judge, scripted answers, lmms-eval runs in a subprocess) and
one module per benchmark, named as the benchmark, writing that benchmark's synthetic data in its real layout. Nothing
in the product imports it (``cli.py`` runs it); the tests and speed scripts build their data with it."""
