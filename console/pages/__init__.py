"""The console's pages for people, served at `/` by the same application as the API: `routes`
(the pages over the API's own handlers), `archive` (the Archive page and its verify form),
`charts` (SVG drawn on the server), `templates/` and `static/` (docs/console.md)."""
