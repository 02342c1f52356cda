"""The broker worker: what running jobs from a message broker needs, whatever the broker.

JetStream (``outbox.jetstream``) and Redis Streams (``outbox.queue.redis``) each speak their
own protocol for fetching, acknowledging, handing back and dead-lettering a delivery;
everything else a worker does is here, once:

- ``context``: what one worker's lanes share (settings, handlers, counts, clocks, stop
  signals, paused queues, cancel marks), and what a broker worker refuses at start;
- ``lane``: one queue's deliveries — prefetch window, the cap, sync handlers on threads
  and async ones on the loop, timeouts, the lease ticker, settling every outcome through
  ``outbox.queue.policy``, graceful stop — over a transport's few methods (``BrokerLane``);
- ``worker``: the run loop over a worker's lanes, signals, and lanes that stop together;
- ``inbox``: exactly-once effects of transactional handlers (the ``outbox_inbox`` table).

Nothing here imports a broker's client library.
"""
