"""One Azure CLI process for many ``az`` commands: the CLI's own test harness runs its commands in process
(``azure.cli.core``'s ``invoke``, as ``az`` itself does), and so does this. Run by the interpreter ``az``
uses; reads one JSON argument list per line on stdin and answers one JSON line ``{"code", "stdout",
"stderr"}`` per command, each command's output read from its own temporary files (file descriptors 1 and
2 point there while it runs). Used by ``tests/integration/test_azure_cli.py``: each ``az`` process costs
about 2 s of CPU to start, a command in a warm one a fraction of that.
"""

import json
import os
import sys
import tempfile

from azure.cli.core import get_default_cli


def main() -> None:
    answers = os.fdopen(os.dup(1), "w")
    cli = get_default_cli()
    for line in sys.stdin:
        argv = json.loads(line)
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            saved = os.dup(1), os.dup(2)
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            try:
                code = cli.invoke(argv, out_file=sys.stdout)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])
            out.seek(0)
            err.seek(0)
            answers.write(json.dumps({"code": code, "stdout": out.read(), "stderr": err.read()}) + "\n")
            answers.flush()


if __name__ == "__main__":
    main()
