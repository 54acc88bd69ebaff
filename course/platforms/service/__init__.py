"""The instant-feedback submission service (`autograd-course serve`): students upload a notebook and read
its feedback as soon as the warm pool has graded it; instructors watch a live dashboard and export grades.

  policy.py   the `service:` policies at work (attempts left, cooldown, best/last, numbers per attempt)
  store.py    storage through SQLAlchemy (SQLite by default, PostgreSQL by URL): tokens as hashes, attempts
  worker.py   grading threads over one warm pool, through `grading.grade_submission`
  results.py  the class summary, integrity, grades CSV, LMS CSV and nbgrader gradebook from the attempts
  pages.py    the student's page and the instructor's dashboard (HTML)
  edge.py     the bounds of the edge: connections, time for a request's headers and body, uploads per student
  connections.py  uvicorn's HTTP/1.1 protocol holding the edge's bounds where the bytes arrive
  app.py      the ASGI application (Starlette): it only wires the routes of the rooms below and the middleware
    state.py             the running service's state (`Service`): waiters, uploads and pages in progress, signing
    uploads.py           receiving an upload: body, notebook, checks, the attempt stored; refusals as UploadRefused
    access.py            what a request under a link passes first: token, pace, retired links (410), records' 503
    api.py               the JSON API (/api/submissions) and /healthz
    student_pages.py     the student's pages (/s/<token>/...): upload form, attempts, feedback, notebook
    instructor_pages.py  the instructor's (/i/<token>/...): dashboard, summary, exports, recording into the term
    middleware.py        the security headers on every response
  run.py      serving it with uvicorn; issuing tokens
  client.py   `autograd-course submit`: the API from the command line (standard library only)
"""
