"""An asyncio request handler (FastAPI-style) guarding a shared resource with libsync's Mutex:
`async with` suspends the request's task, never the event loop, and a thread of the same
process (a blocking worker) takes turns on the same lock."""
import asyncio
import threading

from libsync.locks import Mutex

stock = {"apples": 100}
stock_lock = Mutex(name="stock")


async def save(snapshot):  # e.g. a write to a database: an await while the lock is held
    await asyncio.sleep(0)


async def buy(item, count):  # @app.post("/buy/{item}") in FastAPI
    try:
        async with asyncio.timeout(5):  # a bounded wait: give up, holding nothing
            await stock_lock.acquire_async()
    except TimeoutError:
        return 503, "busy, try again"
    try:
        if stock[item] < count:
            return 409, "sold out"
        stock[item] -= count
        await save(dict(stock))
        return 200, f"{stock[item]} {item} left"
    finally:
        stock_lock.release()  # the task that took it releases it


def restock(times):  # a thread of the same process, blocking form
    for _ in range(times):
        with stock_lock:
            stock["apples"] += 1


async def main():
    worker = threading.Thread(target=restock, args=(20,))
    worker.start()
    replies = await asyncio.gather(*(buy("apples", 1) for _ in range(50)))
    await asyncio.to_thread(worker.join)
    sold = sum(1 for status, _ in replies if status == 200)
    print(f"sold {sold}, in stock {stock['apples']}, last reply: {replies[-1]}")
    return sold == 50 and stock["apples"] == 100 - 50 + 20


if not asyncio.run(main()):
    raise SystemExit("the stock does not add up")
