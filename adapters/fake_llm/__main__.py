"""``python -m tether.adapters.fake_llm``: serve a script (as ``tether fake-llm``)."""

from tether.adapters.fake_llm import main

raise SystemExit(main())
