"""``python -m fedad.cli``: the ``fedad`` command line."""

from fedad.cli.app import main

if __name__ == "__main__":
    main()
