"""``cloudqueue dashboard``: a live web view of the queues and the workers on them.

Optional: it needs the ``dashboard`` extra (Starlette and uvicorn), so nothing here is imported
until the command runs. ``access`` decides who may see and change the numbers, ``app`` serves the
page, its static files (uPlot, vendored with its license, draws the charts: no JavaScript build
step) and ``/api/state``, which is what ``cloudqueue.workers.views.sampler`` gathers.
"""
