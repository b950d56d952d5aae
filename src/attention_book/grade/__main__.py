"""``python -m attention_book.grade``: grade notebooks of any chapter (see :mod:`attention_book.grade.cli`)."""

import sys

from .cli import main

sys.exit(main())
