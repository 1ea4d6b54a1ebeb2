"""The web console of `timerwheel serve --console-port` (docs/console.md).

A client of the server's own gRPC API, served over HTTP: `timerwheel.console.http` runs it (uvicorn
on a thread), `timerwheel.console.app` holds its JSON endpoints (Starlette),
`timerwheel.console.views` turns API answers into the page's JSON, and `console/static/` is the page
(HTML, CSS, JavaScript and the vendored Chartist), with no build step.
"""
