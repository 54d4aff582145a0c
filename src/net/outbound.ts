import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/** Why an outbound URL (webhook, tool server) is refused; the message is shown to API clients. */
export class OutboundUrlError extends Error {}

// Loopback, private, link-local, carrier-grade NAT, multicast, reserved and documentation ranges.
const blocked = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  blocked.addSubnet(net, prefix, 'ipv4');
}
for (const [net, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['::ffff:0:0', 96],
  ['64:ff9b::', 96],
  ['100::', 64],
  ['2001:db8::', 32],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
] as const) {
  blocked.addSubnet(net, prefix, 'ipv6');
}

export function isPrivateAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 0) return true;
  if (family === 6) {
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
    if (mapped) return blocked.check(mapped[1], 'ipv4');
    return blocked.check(address, 'ipv6');
  }
  return blocked.check(address, 'ipv4');
}

/**
 * The static half of the outbound rule (DESIGN.md 4): https and not an obviously private host,
 * unless OUTBOUND_ALLOW_PRIVATE. Checked when a URL is saved; `guardedLookup` checks the resolved
 * address again at connection time, since DNS can point a public name at a private address.
 */
export function checkOutboundUrl(raw: string, allowPrivate: boolean): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new OutboundUrlError('is not a valid URL');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new OutboundUrlError('must use https');
  if (url.username || url.password) throw new OutboundUrlError('must not contain credentials');
  if (allowPrivate) return url;
  if (url.protocol !== 'https:') throw new OutboundUrlError('must use https');
  const host = url.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (
    host === 'localhost' ||
    host.endsWith('.localhost') ||
    host.endsWith('.local') ||
    host.endsWith('.internal')
  ) {
    throw new OutboundUrlError('must point to a public address');
  }
  if (isIP(host) && isPrivateAddress(host)) throw new OutboundUrlError('must point to a public address');
  return url;
}

/**
 * A `lookup` for http(s).request / net.connect that refuses private addresses after DNS
 * resolution, so the address actually connected to is the one checked.
 */
export function guardedLookup(allowPrivate: boolean): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses: LookupAddress[]) => {
      if (err) return (callback as any)(err);
      const allowed = allowPrivate ? addresses : addresses.filter((a) => !isPrivateAddress(a.address));
      if (allowed.length === 0) {
        return (callback as any)(new OutboundUrlError(`${hostname} resolves to a private address`));
      }
      if ((options as { all?: boolean }).all) return (callback as any)(null, allowed);
      return (callback as any)(null, allowed[0].address, allowed[0].family);
    });
  };
}
