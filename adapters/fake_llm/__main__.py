"""``python -m adapters.fake_llm``: serve a script (as ``tether fake-llm``)."""

from adapters.fake_llm import main

raise SystemExit(main())
