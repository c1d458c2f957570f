// C side of the verbs provider (build tag rdma). Every function is static:
// each cgo file that includes this header gets its own copy, and no symbol
// leaves the package.
//
// Rules kept here:
//   - No Go pointer is stored in C memory. Go passes plain values, or a
//     pointer to Go memory that holds no Go pointers (struct cap_wc,
//     struct cap_cm_event, private data), only for the length of the call.
//   - Functions return 0 or a positive errno value; they never leave the
//     answer in errno alone.
//   - Work request chains (ibv_send_wr, ibv_recv_wr, ibv_sge) are built in
//     C memory owned by a struct cap_chain.

#ifndef CAPSULE_CVERBS_H
#define CAPSULE_CVERBS_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

static inline int cap_errno(void) { return errno ? errno : EIO; }

// ---- work request chains ----

// One send WR as Go writes it: plain values only. The SGEs of WR i follow
// those of WR i-1 in the chain's sge array.
struct cap_swr {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t imm;       // host byte order; converted to network order here
	uint32_t inv_rkey;
	uint32_t num_sge;
	uint32_t opcode;    // enum ibv_wr_opcode
	uint32_t flags;     // enum ibv_send_flags
};

// One receive WR as Go writes it.
struct cap_rwr {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t pad;
};

// A chain is the C scratch memory of one QP's send queue, receive queue or
// one SRQ: Go fills swr/rwr and sge, C links them into ibv WRs.
struct cap_chain {
	int max_wr;
	int max_sge;               // per WR
	struct cap_swr *swr;       // max_wr, send chains only
	struct cap_rwr *rwr;       // max_wr, receive chains only
	struct ibv_sge *sge;       // max_wr * max_sge
	struct ibv_send_wr *send;  // max_wr, send chains only
	struct ibv_recv_wr *recv;  // max_wr, receive chains only
};

static void cap_chain_free(struct cap_chain *c) {
	if (!c)
		return;
	free(c->swr);
	free(c->rwr);
	free(c->sge);
	free(c->send);
	free(c->recv);
	free(c);
}

static struct cap_chain *cap_chain_new(int max_wr, int max_sge, int send) {
	struct cap_chain *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	if (max_sge < 1)
		max_sge = 1;
	c->max_wr = max_wr;
	c->max_sge = max_sge;
	c->sge = calloc((size_t)max_wr * (size_t)max_sge, sizeof(struct ibv_sge));
	if (send) {
		c->swr = calloc(max_wr, sizeof(struct cap_swr));
		c->send = calloc(max_wr, sizeof(struct ibv_send_wr));
		if (!c->swr || !c->send)
			goto fail;
	} else {
		c->rwr = calloc(max_wr, sizeof(struct cap_rwr));
		c->recv = calloc(max_wr, sizeof(struct ibv_recv_wr));
		if (!c->rwr || !c->recv)
			goto fail;
	}
	if (!c->sge)
		goto fail;
	return c;
fail:
	cap_chain_free(c);
	return NULL;
}

// cap_build_send links the first n send WRs of c into a chain.
static void cap_build_send(struct cap_chain *c, int n) {
	struct ibv_sge *sge = c->sge;
	for (int i = 0; i < n; i++) {
		struct cap_swr *s = &c->swr[i];
		struct ibv_send_wr *w = &c->send[i];
		memset(w, 0, sizeof(*w));
		w->wr_id = s->wr_id;
		w->next = (i + 1 < n) ? &c->send[i + 1] : NULL;
		w->sg_list = s->num_sge ? sge : NULL;
		w->num_sge = (int)s->num_sge;
		w->opcode = (enum ibv_wr_opcode)s->opcode;
		w->send_flags = s->flags;
		switch (w->opcode) {
		case IBV_WR_SEND_WITH_IMM:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			w->imm_data = htonl(s->imm);
			break;
		case IBV_WR_SEND_WITH_INV:
			w->invalidate_rkey = s->inv_rkey;
			break;
		default:
			break;
		}
		if (w->opcode == IBV_WR_RDMA_WRITE || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
		    w->opcode == IBV_WR_RDMA_READ) {
			w->wr.rdma.remote_addr = s->remote_addr;
			w->wr.rdma.rkey = s->rkey;
		}
		sge += s->num_sge;
	}
}

// cap_build_recv links the first n receive WRs of c into a chain.
static void cap_build_recv(struct cap_chain *c, int n) {
	struct ibv_sge *sge = c->sge;
	for (int i = 0; i < n; i++) {
		struct cap_rwr *r = &c->rwr[i];
		struct ibv_recv_wr *w = &c->recv[i];
		w->wr_id = r->wr_id;
		w->next = (i + 1 < n) ? &c->recv[i + 1] : NULL;
		w->sg_list = r->num_sge ? sge : NULL;
		w->num_sge = (int)r->num_sge;
		sge += r->num_sge;
	}
}

// cap_send_view reads WR i of a built send chain back into the form Go
// wrote (immediate data in host order), with the index of the next WR
// (-1 at the end) and the offset of its SGEs in the chain's sge array.
static void cap_send_view(struct cap_chain *c, int i, struct cap_swr *out, int *next, int *sge_off) {
	struct ibv_send_wr *w = &c->send[i];
	memset(out, 0, sizeof(*out));
	out->wr_id = w->wr_id;
	out->num_sge = (uint32_t)w->num_sge;
	out->opcode = w->opcode;
	out->flags = w->send_flags;
	if (w->opcode == IBV_WR_SEND_WITH_IMM || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		out->imm = ntohl(w->imm_data);
	if (w->opcode == IBV_WR_SEND_WITH_INV)
		out->inv_rkey = w->invalidate_rkey;
	out->remote_addr = w->wr.rdma.remote_addr;
	out->rkey = w->wr.rdma.rkey;
	*next = w->next ? (int)(w->next - c->send) : -1;
	*sge_off = w->sg_list ? (int)(w->sg_list - c->sge) : -1;
}

// The cap_post_* functions build and post the first n WRs of c in one
// call. On failure *bad is the index of the WR the device refused.
static int cap_post_send(struct ibv_qp *qp, struct cap_chain *c, int n, int *bad) {
	struct ibv_send_wr *bw = NULL;
	cap_build_send(c, n);
	int r = ibv_post_send(qp, c->send, &bw);
	*bad = bw ? (int)(bw - c->send) : 0;
	return r;
}

static int cap_post_recv(struct ibv_qp *qp, struct cap_chain *c, int n, int *bad) {
	struct ibv_recv_wr *bw = NULL;
	cap_build_recv(c, n);
	int r = ibv_post_recv(qp, c->recv, &bw);
	*bad = bw ? (int)(bw - c->recv) : 0;
	return r;
}

static int cap_post_srq_recv(struct ibv_srq *srq, struct cap_chain *c, int n, int *bad) {
	struct ibv_recv_wr *bw = NULL;
	cap_build_recv(c, n);
	int r = ibv_post_srq_recv(srq, c->recv, &bw);
	*bad = bw ? (int)(bw - c->recv) : 0;
	return r;
}

// ---- completions ----

// A work completion as Go reads it: the union of ibv_wc resolved, the
// immediate data in host byte order.
struct cap_wc {
	uint64_t wr_id;
	uint32_t status;   // enum ibv_wc_status
	uint32_t opcode;   // enum ibv_wc_opcode; undefined unless status is success
	uint32_t byte_len;
	uint32_t imm;      // with IBV_WC_WITH_IMM, host order
	uint32_t inv_rkey; // with IBV_WC_WITH_INV
	uint32_t qp_num;
	uint32_t wc_flags;
	uint32_t pad;
};

// cap_poll polls up to n completions into out (Go memory, plain values).
// It returns how many, or -1 when the device reports an error.
static int cap_poll(struct ibv_cq *cq, int n, struct cap_wc *out) {
	struct ibv_wc wc[32];
	int got = 0;
	while (got < n) {
		int want = n - got;
		if (want > 32)
			want = 32;
		int k = ibv_poll_cq(cq, want, wc);
		if (k < 0)
			return got ? got : -1;
		for (int i = 0; i < k; i++) {
			struct cap_wc *o = &out[got + i];
			o->wr_id = wc[i].wr_id;
			o->status = wc[i].status;
			o->opcode = wc[i].opcode;
			o->byte_len = wc[i].byte_len;
			o->imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0;
			o->inv_rkey = (wc[i].wc_flags & IBV_WC_WITH_INV) ? wc[i].invalidated_rkey : 0;
			o->qp_num = wc[i].qp_num;
			o->wc_flags = wc[i].wc_flags;
			o->pad = 0;
		}
		got += k;
		if (k < want)
			break;
	}
	return got;
}

// cap_cq_event takes and acknowledges one event of a completion channel.
// With the channel's fd non-blocking it returns EAGAIN when there is none.
static int cap_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *ctx;
	errno = 0;
	if (ibv_get_cq_event(ch, &cq, &ctx))
		return cap_errno();
	ibv_ack_cq_events(cq, 1);
	return 0;
}

static int cap_req_notify(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

// cap_async_event takes and acknowledges one asynchronous event of a
// device and says which CQ, QP or SRQ it names (NULL for the others).
static int cap_async_event(struct ibv_context *ctx, int *type, struct ibv_cq **cq,
			   struct ibv_qp **qp, struct ibv_srq **srq) {
	struct ibv_async_event ev;
	*cq = NULL;
	*qp = NULL;
	*srq = NULL;
	errno = 0;
	if (ibv_get_async_event(ctx, &ev))
		return cap_errno();
	*type = ev.event_type;
	switch (ev.event_type) {
	case IBV_EVENT_CQ_ERR:
		*cq = ev.element.cq;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		*qp = ev.element.qp;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		*srq = ev.element.srq;
		break;
	default:
		break;
	}
	ibv_ack_async_event(&ev);
	return 0;
}

static int cap_async_fd(struct ibv_context *ctx) { return ctx->async_fd; }

static int cap_notify_established(struct rdma_cm_id *id) {
	errno = 0;
	return rdma_notify(id, IBV_EVENT_COMM_EST) ? cap_errno() : 0;
}

static int cap_set_nonblock(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return cap_errno();
	return 0;
}

// ---- devices, regions, queues ----

static int cap_device_count(void) {
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l)
		return 0;
	ibv_free_device_list(l);
	return n;
}

static int cap_transport_ib(struct ibv_context *ctx) {
	return ctx->device->transport_type == IBV_TRANSPORT_IB;
}

static const char *cap_device_name(struct ibv_context *ctx) {
	return ibv_get_device_name(ctx->device);
}

// cap_reg_mr registers [addr, addr+len). addr is an integer so that no Go
// pointer is passed: the kernel keeps the pages pinned after the call.
static struct ibv_mr *cap_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t len, int access, int *err) {
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(pd, (void *)addr, len, access);
	*err = mr ? 0 : cap_errno();
	return mr;
}

static int cap_dereg_mr(struct ibv_mr *mr) { return ibv_dereg_mr(mr); }

static struct ibv_cq *cap_create_cq(struct ibv_context *ctx, int depth, struct ibv_comp_channel *ch, int *err) {
	errno = 0;
	struct ibv_cq *cq = ibv_create_cq(ctx, depth, NULL, ch, 0);
	*err = cq ? 0 : cap_errno();
	return cq;
}

static struct ibv_srq *cap_create_srq(struct ibv_pd *pd, int depth, int max_sge, int *err) {
	struct ibv_srq_init_attr a;
	memset(&a, 0, sizeof(a));
	a.attr.max_wr = depth;
	a.attr.max_sge = max_sge;
	errno = 0;
	struct ibv_srq *s = ibv_create_srq(pd, &a);
	*err = s ? 0 : cap_errno();
	return s;
}

// cap_create_qp creates an RC QP on id (bound to pd's device); librdmacm
// moves it to INIT.
static int cap_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *scq,
			 struct ibv_cq *rcq, struct ibv_srq *srq, int max_send_wr,
			 int max_recv_wr, int max_sge, int max_inline, int sig_all) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.srq = srq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = sig_all;
	a.cap.max_send_wr = max_send_wr;
	a.cap.max_recv_wr = srq ? 0 : max_recv_wr;
	a.cap.max_send_sge = max_sge;
	a.cap.max_recv_sge = srq ? 0 : max_sge;
	a.cap.max_inline_data = max_inline;
	errno = 0;
	if (rdma_create_qp(id, pd, &a))
		return cap_errno();
	return 0;
}

static int cap_qp_to_error(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

static uint32_t cap_qp_num(struct ibv_qp *qp) { return qp->qp_num; }

// ---- connection manager ----

// An rdma_cm event as Go reads it, copied before the event is acknowledged.
struct cap_cm_event {
	struct rdma_cm_id *id;
	struct rdma_cm_id *listen_id;
	int32_t type;
	int32_t status;
	int32_t private_len;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t pad[2];
	uint8_t private_data[256];
};

// cap_cm_event takes, copies and acknowledges one event of ch. With the
// channel's fd non-blocking it returns EAGAIN when there is none.
static int cap_cm_event(struct rdma_event_channel *ch, struct cap_cm_event *out) {
	struct rdma_cm_event *ev;
	errno = 0;
	if (rdma_get_cm_event(ch, &ev))
		return cap_errno();
	memset(out, 0, sizeof(*out));
	out->id = ev->id;
	out->listen_id = ev->listen_id;
	out->type = ev->event;
	out->status = ev->status;
	switch (ev->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
	case RDMA_CM_EVENT_ESTABLISHED:
	case RDMA_CM_EVENT_REJECTED:
		if (ev->param.conn.private_data && ev->param.conn.private_data_len) {
			out->private_len = ev->param.conn.private_data_len;
			memcpy(out->private_data, ev->param.conn.private_data, out->private_len);
		}
		out->responder_resources = ev->param.conn.responder_resources;
		out->initiator_depth = ev->param.conn.initiator_depth;
		break;
	default:
		break;
	}
	rdma_ack_cm_event(ev);
	return 0;
}

static int cap_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id) {
	errno = 0;
	return rdma_create_id(ch, id, NULL, RDMA_PS_TCP) ? cap_errno() : 0;
}

static int cap_bind(struct rdma_cm_id *id, struct sockaddr_storage *ss) {
	errno = 0;
	return rdma_bind_addr(id, (struct sockaddr *)ss) ? cap_errno() : 0;
}

static int cap_listen(struct rdma_cm_id *id, int backlog) {
	errno = 0;
	return rdma_listen(id, backlog) ? cap_errno() : 0;
}

static int cap_resolve_addr(struct rdma_cm_id *id, struct sockaddr_storage *dst, int ms) {
	errno = 0;
	return rdma_resolve_addr(id, NULL, (struct sockaddr *)dst, ms) ? cap_errno() : 0;
}

static int cap_resolve_route(struct rdma_cm_id *id, int ms) {
	errno = 0;
	return rdma_resolve_route(id, ms) ? cap_errno() : 0;
}

static int cap_connect(struct rdma_cm_id *id, const void *priv, int len, int rnr_retry) {
	struct rdma_conn_param p;
	memset(&p, 0, sizeof(p));
	p.private_data = len ? priv : NULL;
	p.private_data_len = (uint8_t)len;
	p.responder_resources = RDMA_MAX_RESP_RES;
	p.initiator_depth = RDMA_MAX_INIT_DEPTH;
	p.retry_count = 7;
	p.rnr_retry_count = (uint8_t)rnr_retry;
	errno = 0;
	return rdma_connect(id, &p) ? cap_errno() : 0;
}

// cap_modify_from_cm moves qp (not attached to id) to state with the
// attributes the connection manager computes for id, as librdmacm does for
// a QP it owns. On InfiniBand link layers bits 21-23 of the mask, which the
// kernel reports for RoCE only, are cleared, as librdmacm does.
static int cap_modify_from_cm(struct rdma_cm_id *id, struct ibv_qp *qp, enum ibv_qp_state state,
			      int resp_res, int init_depth, int min_rnr_timer) {
	struct ibv_qp_attr a;
	int mask = 0;
	memset(&a, 0, sizeof(a));
	a.qp_state = state;
	errno = 0;
	if (rdma_init_qp_attr(id, &a, &mask))
		return cap_errno();
	if (state == IBV_QPS_RTR) {
		struct ibv_port_attr pa;
		memset(&pa, 0, sizeof(pa));
		if (ibv_query_port(id->verbs, id->port_num, &pa) == 0 &&
		    pa.link_layer == IBV_LINK_LAYER_INFINIBAND)
			mask &= ~0xe00000;
		a.max_dest_rd_atomic = (uint8_t)resp_res;
		if (min_rnr_timer >= 0) {
			a.min_rnr_timer = (uint8_t)min_rnr_timer;
			mask |= IBV_QP_MIN_RNR_TIMER;
		}
	}
	if (state == IBV_QPS_RTS)
		a.max_rd_atomic = (uint8_t)init_depth;
	return ibv_modify_qp(qp, &a, mask);
}

// cap_accept answers the connection request on id with qp, a QP that was
// created on another id. On InfiniBand and RoCE it moves qp through INIT,
// RTR and RTS with id's attributes first; on iWARP the kernel does that as
// part of the accept.
static int cap_accept(struct rdma_cm_id *id, struct ibv_qp *qp, const void *priv, int len,
		      int req_resp, int req_init, int rnr_retry, int min_rnr_timer) {
	struct ibv_device_attr da;
	int r;
	memset(&da, 0, sizeof(da));
	if ((r = ibv_query_device(id->verbs, &da)))
		return r;
	// We serve the peer's Reads (its initiator depth) and issue ours up to
	// its responder resources, bounded by what this device can do.
	int resp = req_init < da.max_qp_rd_atom ? req_init : da.max_qp_rd_atom;
	int init = req_resp < da.max_qp_init_rd_atom ? req_resp : da.max_qp_init_rd_atom;
	if (resp > 255)
		resp = 255;
	if (init > 255)
		init = 255;
	if (cap_transport_ib(id->verbs)) {
		if ((r = cap_modify_from_cm(id, qp, IBV_QPS_INIT, 0, 0, -1)))
			return r;
		if ((r = cap_modify_from_cm(id, qp, IBV_QPS_RTR, resp, init, min_rnr_timer)))
			return r;
		if ((r = cap_modify_from_cm(id, qp, IBV_QPS_RTS, resp, init, -1)))
			return r;
	}
	struct rdma_conn_param p;
	memset(&p, 0, sizeof(p));
	p.private_data = len ? priv : NULL;
	p.private_data_len = (uint8_t)len;
	p.responder_resources = (uint8_t)resp;
	p.initiator_depth = (uint8_t)init;
	p.rnr_retry_count = (uint8_t)rnr_retry;
	p.qp_num = qp->qp_num;
	p.srq = qp->srq != NULL;
	errno = 0;
	return rdma_accept(id, &p) ? cap_errno() : 0;
}

static int cap_reject(struct rdma_cm_id *id, const void *priv, int len) {
	errno = 0;
	return rdma_reject(id, len ? priv : NULL, (uint8_t)len) ? cap_errno() : 0;
}

static int cap_disconnect(struct rdma_cm_id *id) {
	errno = 0;
	return rdma_disconnect(id) ? cap_errno() : 0;
}

static int cap_destroy_id(struct rdma_cm_id *id) {
	errno = 0;
	return rdma_destroy_id(id) ? cap_errno() : 0;
}

static struct ibv_context *cap_id_verbs(struct rdma_cm_id *id) { return id->verbs; }
static struct ibv_qp *cap_id_qp(struct rdma_cm_id *id) { return id->qp; }

// cap_fill_sockaddr writes an IPv4 (len 4) or IPv6 (len 16) address and a
// port into ss.
static void cap_fill_sockaddr(struct sockaddr_storage *ss, const uint8_t *ip, int len, int port, uint32_t zone) {
	memset(ss, 0, sizeof(*ss));
	if (len == 4) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons((uint16_t)port);
		memcpy(&s->sin_addr, ip, 4);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons((uint16_t)port);
		s->sin6_scope_id = zone;
		memcpy(&s->sin6_addr, ip, 16);
	}
}

// cap_id_addr reads the local (peer == 0) or peer address of id into ip
// (16 bytes) and returns its length (4, 16 or 0 when unset).
static int cap_id_addr(struct rdma_cm_id *id, int peer, uint8_t *ip, int *port) {
	struct sockaddr *sa = peer ? rdma_get_peer_addr(id) : rdma_get_local_addr(id);
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)sa;
		memcpy(ip, &s->sin_addr, 4);
		*port = ntohs(s->sin_port);
		return 4;
	}
	if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)sa;
		memcpy(ip, &s->sin6_addr, 16);
		*port = ntohs(s->sin6_port);
		return 16;
	}
	*port = 0;
	return 0;
}

#endif
