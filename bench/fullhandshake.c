/*
 * fullhandshake.c: an LD_PRELOAD shim for wrk that makes every TLS
 * handshake a full one, for the handshake rows of bench/run.sh (row 12).
 *
 * wrk reconnects (after `Connection: close`) by SSL_shutdown and SSL_clear
 * on the same SSL object, and SSL_clear keeps the session of a connection
 * that was shut down cleanly: the next SSL_connect offers it, and a Go
 * server (petstore, Caddy) resumes it with its session ticket. Measured
 * without this shim: 8 full handshakes and 7,481 resumed in 2 s on 8
 * connections. Dropping the session after SSL_clear (SSL_set_session with
 * NULL, as OpenSSL's manual says) makes each connect a new session;
 * run.sh checks that against bench/baseline's counters before the rows.
 *
 * Both OpenSSL functions are looked up at the first call, so the shim
 * loads into programs without libssl too.
 */
#define _GNU_SOURCE
#include <dlfcn.h>

typedef struct ssl_st SSL;

int SSL_clear(SSL *s)
{
	static int (*clear)(SSL *);
	static int (*set_session)(SSL *, void *);
	if (!clear) {
		clear = (int (*)(SSL *))dlsym(RTLD_NEXT, "SSL_clear");
		set_session = (int (*)(SSL *, void *))dlsym(RTLD_NEXT, "SSL_set_session");
	}
	int ok = clear(s);
	set_session(s, 0);
	return ok;
}
