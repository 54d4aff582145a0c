import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';

/** Why an outbound URL (webhook, tool server, model) is refused; the message is shown to API clients. */
export class OutboundUrlError extends Error {}

/**
 * Only global unicast is public. `ipaddr.js` names every special-purpose range of the IANA
 * registries (loopback, private, link-local, CGNAT, reserved, documentation, NAT64, 6to4, Teredo,
 * site-local, unique-local, multicast...); anything it classifies otherwise is refused. An
 * IPv4-mapped address is judged as its IPv4 address.
 */
export function isPrivateAddress(address: string): boolean {
  // node's parser first: ipaddr.js also accepts legacy forms (octal, `127.1`) that are not ours to guess.
  if (isIP(address) === 0) return true;
  let ip = ipaddr.parse(address);
  if (ip.kind() === 'ipv6') {
    const v6 = ip as ipaddr.IPv6;
    if (v6.isIPv4MappedAddress()) ip = v6.toIPv4Address();
    // IPv4-compatible `::a.b.c.d` (::/96, deprecated by RFC 4291) has no name in ipaddr.js.
    else if (v6.parts.slice(0, 6).every((part) => part === 0)) return true;
  }
  return ip.range() !== 'unicast';
}

/** Names that mean this machine or a local network, whatever DNS says; a trailing dot changes nothing. */
function isLocalName(host: string): boolean {
  const name = host.replace(/\.+$/, '');
  return (
    name === 'localhost' ||
    name.endsWith('.localhost') ||
    name.endsWith('.local') ||
    name.endsWith('.internal')
  );
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
  if (isLocalName(host)) throw new OutboundUrlError('must point to a public address');
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
