"""``vramfit serve``: the calculator, guide and JSON API on a local address (the ``web`` extra)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (127.0.0.1: this machine only)."),
        port: int = typer.Option(8000, "--port", min=1, max=65535, help="TCP port."),
        allow_host: list[str] = typer.Option([], "--allow-host", help="Another Host name to answer to (a "
                                             "LAN name or address); localhost and --host always are."),
    ) -> None:
        """Serve the web calculator, the guide (EN/PT) and the JSON API."""
        try:
            import uvicorn

            from vramfit.web import create_app
        except ImportError as exc:
            typer.echo(f"error: the web extra is not installed ({exc.name}); pip install 'vramfit[web]'", err=True)
            raise typer.Exit(2) from None
        shown = f"[{host}]" if ":" in host else host
        typer.echo(f"vramfit web: http://{shown}:{port}/  (guide: /guide, API schema: /openapi.json; Ctrl+C stops)")
        from vramfit.calibration import load_active

        try:
            uvicorn.run(create_app(host, allow_host, calibration=load_active()), host=host, port=port, log_level="warning")
        except OSError as exc:  # an unknown host name, a port in use or not allowed: one line
            typer.echo(f"error: cannot listen on {host[:80]}:{port}: {exc.strerror or exc}", err=True)
            raise typer.Exit(2) from None
