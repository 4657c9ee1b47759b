"""Paper reproductions (``hiddenstate reproduce NAME``) and the synthetic tasks they train on."""
