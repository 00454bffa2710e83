"""``cloudqueue dashboard``: a live web view of the queues and the workers on them.

Optional: it needs the ``dashboard`` extra (Starlette and uvicorn), so nothing here is imported
until the command runs. ``sampling`` gathers the numbers, ``access`` decides who may see and
change them, ``app`` serves the page, its static files (uPlot, vendored with its license, draws
the charts: no JavaScript build step) and ``/api/state``.
"""
