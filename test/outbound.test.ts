/** The outbound address rule (src/net/outbound.ts) shared by webhooks, tool servers and model base URLs. */
import { describe, expect, it } from 'vitest';
import { checkOutboundUrl, isPrivateAddress, OutboundUrlError } from '../src/net/outbound.js';

describe('isPrivateAddress', () => {
  it.each([
    // IPv4: loopback, private, link-local (cloud metadata), CGNAT, this network, reserved, multicast, broadcast
    '127.0.0.1',
    '127.255.255.254',
    '10.0.0.1',
    '172.16.5.4',
    '192.168.1.1',
    '169.254.169.254',
    '100.64.0.1',
    '0.0.0.0',
    '192.0.0.8',
    '192.0.2.1',
    '198.18.0.1',
    '198.51.100.7',
    '203.0.113.9',
    '224.0.0.251',
    '240.0.0.1',
    '255.255.255.255',
    // IPv6: unspecified, loopback, IPv4-mapped private, IPv4-compatible (::/96), NAT64
    '::',
    '::1',
    '::ffff:127.0.0.1',
    '::ffff:10.0.0.1',
    '::127.0.0.1',
    '::7f00:1',
    '::a9fe:a9fe',
    '64:ff9b::7f00:1',
    // 6to4, Teredo, site-local, unique-local, link-local, documentation, multicast
    '2002:7f00:1::',
    '2002:c0a8:101::1',
    '2001::1',
    '2001:0:4136:e378:8000:63bf:3fff:fdd2',
    'fec0::1',
    'feff::1',
    'fc00::1',
    'fd12:3456::1',
    'fe80::1',
    '2001:db8::1',
    'ff02::1',
    // not an address at all
    'example.com',
    '',
  ])('refuses %s', (address) => {
    expect(isPrivateAddress(address)).toBe(true);
  });

  it.each([
    '8.8.8.8',
    '1.1.1.1',
    '93.184.216.34',
    '::ffff:8.8.8.8',
    '2606:4700:4700::1111',
    '2a00:1450:4001:80b::200e',
  ])('allows the public address %s', (address) => {
    expect(isPrivateAddress(address)).toBe(false);
  });
});

describe('checkOutboundUrl', () => {
  const refusal = (url: string) => {
    try {
      checkOutboundUrl(url, false);
      return null;
    } catch (err) {
      expect(err).toBeInstanceOf(OutboundUrlError);
      return (err as Error).message;
    }
  };

  it.each([
    'https://[::127.0.0.1]/',
    'https://[::7f00:1]/',
    'https://[2002:7f00:1::]/',
    'https://[2001::1]/',
    'https://[fec0::1]/',
    'https://[::ffff:169.254.169.254]/',
    'https://localhost./',
    'https://localhost../',
    'https://LOCALHOST/',
    'https://api.localhost./',
    'https://printer.local./',
    'https://metadata.google.internal./',
    'https://0x7f.1/',
    'https://2130706433/',
    'https://017700000001/',
  ])('refuses %s as not public', (url) => {
    expect(refusal(url)).toBe('must point to a public address');
  });

  it('allows public https hosts, and everything with allowPrivate', () => {
    expect(refusal('https://hooks.example.com/in')).toBeNull();
    expect(refusal('https://[2606:4700:4700::1111]/')).toBeNull();
    expect(refusal('https://8.8.8.8/')).toBeNull();
    expect(refusal('http://hooks.example.com/')).toBe('must use https');
    expect(checkOutboundUrl('http://[::127.0.0.1]:8080/', true).port).toBe('8080');
  });
});
