//go:build cgo && !purego

// The C side of the Gloo backend: a gloo::rendezvous::Store backed by the
// group's Go store, a TCP context per communicator, and one function per
// collective. Exceptions are caught here and returned as errors.

#include "shim.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>

struct aipo_gloo {
	std::shared_ptr<gloo::transport::Device> dev;
	std::shared_ptr<gloo::rendezvous::Context> ctx;
};

namespace {

// A non-null address for empty buffers: Gloo's buffers want one.
char empty_buffer[8];

aipo_gloo_error *make_error(int kind, const std::string &msg) {
	auto *e = static_cast<aipo_gloo_error *>(std::malloc(sizeof(aipo_gloo_error)));
	if (e == nullptr) {
		return nullptr;  // nothing better to do without memory
	}
	e->kind = kind;
	e->msg = static_cast<char *>(std::malloc(msg.size() + 1));
	if (e->msg != nullptr) {
		std::memcpy(e->msg, msg.c_str(), msg.size() + 1);
	}
	return e;
}

bool mentions_timeout(const std::string &msg) {
	return msg.find("Timed out") != std::string::npos || msg.find("timed out") != std::string::npos ||
	       msg.find("Timeout") != std::string::npos;
}

// guard runs f and turns any exception into an error.
template <typename F>
aipo_gloo_error *guard(F f) {
	try {
		f();
		return nullptr;
	} catch (const gloo::IoException &e) {
		std::string msg = e.what();
		return make_error(mentions_timeout(msg) ? AIPO_GLOO_TIMEOUT : AIPO_GLOO_IO, msg);
	} catch (const gloo::EnforceNotMet &e) {
		return make_error(AIPO_GLOO_ENFORCE, e.what());
	} catch (const std::bad_alloc &) {
		return make_error(AIPO_GLOO_OTHER, "out of memory");
	} catch (const std::exception &e) {
		return make_error(AIPO_GLOO_OTHER, e.what());
	} catch (...) {
		return make_error(AIPO_GLOO_OTHER, "unknown C++ exception");
	}
}

// take_message copies and frees an error string from Go.
std::string take_message(char *m) {
	std::string s(m);
	std::free(m);
	return s;
}

// GoStore forwards Gloo's rendezvous to the group's store, under a prefix
// unique to the communicator. Every wait is bounded by the given timeout
// or the one the context was created with.
class GoStore : public gloo::rendezvous::Store {
 public:
	GoStore(uintptr_t h, std::string prefix, std::chrono::milliseconds timeout)
	    : h_(h), prefix_(std::move(prefix)), timeout_(timeout) {}

	void set(const std::string &key, const std::vector<char> &data) override {
		std::string k = prefix_ + key;
		char *err = aipoGlooStoreSet(h_, const_cast<char *>(k.data()), static_cast<int>(k.size()),
				const_cast<char *>(data.data()), static_cast<int>(data.size()));
		if (err != nullptr) {
			throw gloo::IoException(take_message(err));
		}
	}

	std::vector<char> get(const std::string &key) override {
		std::string k = prefix_ + key;
		char *val = nullptr;
		int n = 0;
		char *err = aipoGlooStoreGet(h_, const_cast<char *>(k.data()), static_cast<int>(k.size()),
				timeout_.count(), &val, &n);
		if (err != nullptr) {
			throw gloo::IoException(take_message(err));
		}
		std::vector<char> out(val, val + n);
		std::free(val);
		return out;
	}

	void wait(const std::vector<std::string> &keys) override { wait(keys, timeout_); }

	void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) override {
		std::string all;
		std::vector<int> lens;
		for (const auto &k : keys) {
			all += prefix_ + k;
			lens.push_back(static_cast<int>(prefix_.size() + k.size()));
		}
		char *err = aipoGlooStoreWait(h_, const_cast<char *>(all.data()), lens.data(),
				static_cast<int>(lens.size()), timeout.count());
		if (err != nullptr) {
			throw gloo::IoException(take_message(err));
		}
	}

 private:
	uintptr_t h_;
	std::string prefix_;
	std::chrono::milliseconds timeout_;
};

std::vector<size_t> to_sizes(const int64_t *c, int n) {
	std::vector<size_t> out(n);
	for (int i = 0; i < n; i++) out[i] = static_cast<size_t>(c[i]);
	return out;
}

std::vector<int64_t> to_vec(const int64_t *c, int n) { return std::vector<int64_t>(c, c + n); }

template <typename T>
T *nonnull(T *p) {
	return p != nullptr ? p : reinterpret_cast<T *>(empty_buffer);
}

}  // namespace

extern "C" {

void aipo_gloo_free_error(aipo_gloo_error *e) {
	if (e == nullptr) return;
	std::free(e->msg);
	std::free(e);
}

aipo_gloo_error *aipo_gloo_new(int rank, int size, uintptr_t store, const char *prefix,
		const char *hostname, const char *iface, int64_t connect_ms, int64_t op_ms, aipo_gloo **out) {
	*out = nullptr;
	std::unique_ptr<aipo_gloo> g(new (std::nothrow) aipo_gloo());
	if (!g) return make_error(AIPO_GLOO_OTHER, "out of memory");
	aipo_gloo_error *err = guard([&] {
		gloo::transport::tcp::attr attr;
		if (iface != nullptr && iface[0] != '\0') {
			attr.iface = iface;
		} else {
			attr.hostname = hostname;
		}
		g->dev = gloo::transport::tcp::CreateDevice(attr);
		g->ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
		g->ctx->setTimeout(std::chrono::milliseconds(connect_ms));
		GoStore st(store, prefix, std::chrono::milliseconds(connect_ms));
		g->ctx->connectFullMesh(st, g->dev);
		g->ctx->setTimeout(std::chrono::milliseconds(op_ms));
	});
	if (err != nullptr) return err;
	*out = g.release();
	return nullptr;
}

void aipo_gloo_free(aipo_gloo *g) {
	if (g == nullptr) return;
	try {
		g->ctx.reset();
		g->dev.reset();
	} catch (...) {
		// Destructors close sockets; nothing is left to recover.
	}
	delete g;
}

char *aipo_gloo_address(aipo_gloo *g, int peer) {
	try {
		if (g == nullptr || !g->ctx || peer < 0 || peer >= g->ctx->size || peer == g->ctx->rank) return nullptr;
		auto &pair = g->ctx->getPair(peer);
		if (!pair) return nullptr;
		// Formatted here: Gloo's Address::str() prints the port in network
		// byte order.
		auto *a = dynamic_cast<const gloo::transport::tcp::Address *>(&pair->address());
		if (a == nullptr) return nullptr;
		const struct sockaddr_storage &ss = a->getSockaddr();
		char host[INET6_ADDRSTRLEN] = {0};
		std::string s;
		if (ss.ss_family == AF_INET) {
			auto *in = reinterpret_cast<const struct sockaddr_in *>(&ss);
			if (inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host)) == nullptr) return nullptr;
			s = std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
		} else if (ss.ss_family == AF_INET6) {
			auto *in6 = reinterpret_cast<const struct sockaddr_in6 *>(&ss);
			if (inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host)) == nullptr) return nullptr;
			s = "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
		} else {
			return nullptr;
		}
		char *out = static_cast<char *>(std::malloc(s.size() + 1));
		if (out != nullptr) std::memcpy(out, s.c_str(), s.size() + 1);
		return out;
	} catch (...) {
		return nullptr;
	}
}

aipo_gloo_error *aipo_gloo_allreduce(aipo_gloo *g, float *buf, size_t n, uint32_t tag, int64_t ms) {
	return guard([&] {
		gloo::AllreduceOptions opts(g->ctx);
		opts.setOutput(nonnull(buf), n);
		opts.setReduceFunction(static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
		opts.setTag(tag);
		opts.setTimeout(std::chrono::milliseconds(ms));
		gloo::allreduce(opts);
	});
}

aipo_gloo_error *aipo_gloo_alltoallv(aipo_gloo *g, const float *send, const int64_t *send_counts,
		float *recv, const int64_t *recv_counts, uint32_t tag, int64_t ms) {
	return guard([&] {
		gloo::AlltoallvOptions opts(g->ctx);
		opts.setInput(nonnull(const_cast<float *>(send)), to_vec(send_counts, g->ctx->size));
		opts.setOutput(nonnull(recv), to_vec(recv_counts, g->ctx->size));
		opts.setTag(tag);
		opts.setTimeout(std::chrono::milliseconds(ms));
		gloo::alltoallv(opts);
	});
}

aipo_gloo_error *aipo_gloo_reduce_scatter(aipo_gloo *g, const float *send, float *recv,
		const int64_t *counts, uint32_t tag, int64_t ms) {
	return guard([&] {
		const int size = g->ctx->size, rank = g->ctx->rank;
		const size_t mine = static_cast<size_t>(counts[rank]);
		// Every rank sends segment j of its input to rank j and receives
		// its own segment from every rank, in rank order.
		std::vector<int64_t> recv_counts(size, counts[rank]);
		std::vector<float> parts(mine * size);
		gloo::AlltoallvOptions opts(g->ctx);
		opts.setInput(nonnull(const_cast<float *>(send)), to_vec(counts, size));
		opts.setOutput(nonnull(parts.data()), recv_counts);
		opts.setTag(tag);
		opts.setTimeout(std::chrono::milliseconds(ms));
		gloo::alltoallv(opts);
		// Sum in rank order, so the result does not depend on timing.
		if (mine == 0) return;
		std::memcpy(recv, parts.data(), mine * sizeof(float));
		for (int r = 1; r < size; r++) {
			const float *p = parts.data() + mine * r;
			for (size_t i = 0; i < mine; i++) recv[i] += p[i];
		}
	});
}

aipo_gloo_error *aipo_gloo_allgatherv(aipo_gloo *g, const float *send, float *recv,
		const int64_t *counts, uint32_t tag, int64_t ms) {
	return guard([&] {
		gloo::AllgathervOptions opts(g->ctx);
		opts.setInput(nonnull(const_cast<float *>(send)), static_cast<size_t>(counts[g->ctx->rank]));
		opts.setOutput(nonnull(recv), to_sizes(counts, g->ctx->size));
		opts.setTag(tag);
		opts.setTimeout(std::chrono::milliseconds(ms));
		gloo::allgatherv(opts);
	});
}

aipo_gloo_error *aipo_gloo_broadcast(aipo_gloo *g, void *buf, size_t bytes, int root, uint32_t tag, int64_t ms) {
	return guard([&] {
		gloo::BroadcastOptions opts(g->ctx);
		opts.setOutput(nonnull(static_cast<uint8_t *>(buf)), bytes);
		opts.setRoot(root);
		opts.setTag(tag);
		opts.setTimeout(std::chrono::milliseconds(ms));
		gloo::broadcast(opts);
	});
}

aipo_gloo_error *aipo_gloo_barrier(aipo_gloo *g, uint32_t tag, int64_t ms) {
	return guard([&] {
		gloo::BarrierOptions opts(g->ctx);
		opts.setTag(tag);
		opts.setTimeout(std::chrono::milliseconds(ms));
		gloo::barrier(opts);
	});
}

}  // extern "C"
