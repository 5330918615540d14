"""What the offline demo (``lmms_egoplan.demo.smoke``) and the tests build instead of downloads: tiny
random-weight checkpoints, synthetic media, a loopback judge, scripted answers, lmms-eval runs in
a subprocess. The demo's module of each benchmark (``lmms_egoplan.demo.<benchmark>``) writes its data with them."""
