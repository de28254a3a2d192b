from ddlbench.commbench.cli import main

raise SystemExit(main())
