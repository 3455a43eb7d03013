"""A tenant's day in a real browser: Debian's headless chromium driven by Selenium through Debian's
chromedriver (no browser download), against the console beside a real broker
(tests/console/console_harness.py). Alice logs in, creates a topic, produces a test record,
browses it as JSON, and watches a consumer group made with confluent-kafka: its lag on the group
page, which refreshes itself, falls to 0 as the consumer commits; the tenant's administrator then
sees what it produced on the usage page. The browser's log must hold no
error (a script or style the CSP refused would be one).
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from console_harness import ConsoleCluster, chromium, console_cluster

@pytest.fixture(scope="module")
def cc():
    yield from console_cluster()


@pytest.fixture(scope="module")
def browser():
    driver = chromium(fail=pytest.fail)
    try:
        yield driver
    finally:
        driver.quit()


def test_a_tenants_day(cc: ConsoleCluster, browser: webdriver.Chrome):
    wait = WebDriverWait(browser, 20)
    base = cc.url
    conf = cc.cluster.a.conf()

    # log in
    browser.get(base)
    wait.until(EC.url_contains("/ui/login"))
    browser.find_element(By.ID, "user").send_keys("alice")
    browser.find_element(By.ID, "password").send_keys(cc.password("alice"))
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait.until(EC.url_matches(r"/ui/topics$"))
    assert "alice" in browser.find_element(By.CSS_SELECTOR, ".top .user").text
    assert {c["name"]: c for c in browser.get_cookies()}["shoal_console"]["httpOnly"] is True

    # create a topic
    browser.find_element(By.ID, "topic-name").send_keys("day-orders")
    browser.find_element(By.ID, "topic-partitions").send_keys("2")
    browser.find_element(By.ID, "create-topic").click()
    wait.until(EC.url_contains("/ui/topics/day-orders"))
    assert "Topic day-orders created." in browser.find_element(By.CSS_SELECTOR, ".flash.ok").text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")) == 2

    # produce a test record, then see it as pretty JSON
    browser.find_element(By.ID, "browse").click()
    wait.until(EC.url_contains("/messages"))
    browser.find_element(By.ID, "produce-key").send_keys("order-1")
    browser.find_element(By.ID, "produce-value").send_keys('{"item": "kelp", "qty": 3}')
    browser.find_element(By.ID, "produce-button").click()
    wait.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, ".flash.ok"), "at offset 0"))
    # the format select sends its form by itself (console.js)
    browser.find_element(By.CSS_SELECTOR, "select[name=format] option[value=json]").click()
    wait.until(EC.url_contains("format=json"))
    cell = browser.find_element(By.CSS_SELECTOR, "#messages tbody tr td:nth-child(4) pre")
    assert cell.text == '{\n  "item": "kelp",\n  "qty": 3\n}'
    assert browser.find_element(By.CSS_SELECTOR, "#messages tbody tr td:nth-child(3) pre").text == "order-1"

    # a consumer group made with a real client: its lag, watched fall to 0
    producer = Producer({**conf, "acks": "all"})
    for i in range(5):
        producer.produce("day-orders", b"v%d" % i, b"k%d" % i, partition=1)
    assert producer.flush(15) == 0
    consumer = Consumer({**conf, "group.id": "day-readers", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        from confluent_kafka import TopicPartition

        consumer.assign([TopicPartition("day-orders", 1, 0)])
        consumer.commit(offsets=[TopicPartition("day-orders", 1, 2)], asynchronous=False)
        browser.find_element(By.LINK_TEXT, "Consumer groups").click()
        wait.until(EC.presence_of_element_located((By.LINK_TEXT, "day-readers"))).click()
        wait.until(EC.text_to_be_present_in_element((By.ID, "total-lag"), "3"))
        browser.get(browser.current_url + "?refresh=2")  # the page reloads itself (a meta refresh)
        consumer.commit(offsets=[TopicPartition("day-orders", 1, 5)], asynchronous=False)
        WebDriverWait(browser, 15).until(EC.text_to_be_present_in_element((By.ID, "total-lag"), "0"))
        assert browser.find_element(By.CSS_SELECTOR, "#offsets td.lag").text == "0"
    finally:
        consumer.close()

    # the usage page, as the tenant's administrator, on the console the broker serves: what A produced
    cc.cluster.a.add_user("ann", "ann-secret", admin=True)
    browser.get(cc.cluster.broker.admin_url + "/ui/login")
    browser.find_element(By.ID, "user").send_keys("ann")
    browser.find_element(By.ID, "password").send_keys("ann-secret")
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait.until(EC.url_matches(r"/ui/topics$"))
    browser.find_element(By.LINK_TEXT, "Usage").click()
    wait.until(EC.presence_of_element_located((By.ID, "messages-in")))
    assert int(browser.find_element(By.ID, "messages-in").text.replace(",", "")) >= 6  # the test record and 5
    assert "own counters since" in browser.find_element(By.ID, "usage-source").text

    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors  # a refused script or style (CSP), a 404'd asset, a script error
