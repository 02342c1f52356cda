"""The Redis tests' servers (``tests/fixtures/redis_servers.py``): the shared Redis, and
private servers and a cluster started once per session when a test asks for them."""

from tests.fixtures.redis_servers import (  # noqa: F401
    redis_aof,
    redis_auth,
    redis_cluster,
    redis_queue,
    redis_url,
)
