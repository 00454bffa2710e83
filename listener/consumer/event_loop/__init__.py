"""The event-loop consumer of ``async def`` handlers: fetch, handle and settle on one loop."""
