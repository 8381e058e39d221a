"""`spotcap serve`: the read side over HTTP (FastAPI on uvicorn).

- `access`: how the server reaches the stores, and the 503 when one is down;
- `api`: the JSON API under /api/v1 (the same read functions as the CLI);
- `models`: the response bodies (the OpenAPI description is made from them);
- `openapi`: the description served at /openapi.json, with the errors as really answered;
- `errors`: every failure as a problem document of one sentence;
- `metrics`: the Prometheus collector reading the stores at scrape time;
- `app`: the application that puts them together.
"""
